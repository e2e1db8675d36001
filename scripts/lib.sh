# Shell functions the benchmark scripts share; source it.

# wait_listen PORT [SECONDS]: waits until a TCP socket listens on PORT
# (IPv4 or IPv6, any address), for at most SECONDS (default 10); fails if
# none does. A server's start-up time varies (C fi_pingpong reads its
# providers first, about 0.3 s here): a fixed sleep before its client
# starts loses rounds to "Connection refused".
wait_listen() {
	local hex tries
	hex=$(printf '%04X' "$1")
	tries=$(( ${2:-10} * 50 ))
	while [ "$tries" -gt 0 ]; do
		# (cat: a host without IPv6 has no tcp6, and some awks stop at a
		# missing file.)
		cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
			awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 3) == p {found = 1} END {exit !found}' && return 0
		sleep 0.02
		tries=$((tries - 1))
	done
	echo "nothing listens on TCP port $1" >&2
	return 1
}

# rounds_arg VALUE USAGE: prints VALUE if it is a positive whole number;
# otherwise says USAGE on stderr and exits with status 2.
rounds_arg() {
	case $1 in
	'' | *[!0-9]* | 0 | 0*) echo "usage: $2 (ROUNDS a positive number)" >&2; exit 2 ;;
	esac
	echo "$1"
}
