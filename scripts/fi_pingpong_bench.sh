#!/usr/bin/env bash
# Times `rdmago fi_pingpong` against libfabric's fi_pingpong, pair against
# pair, over the tcp provider's MSG endpoints on loopback: 64-byte
# latency (usec/xfer) and 1 MiB bandwidth (MB/sec), ROUNDS rounds each,
# alternating the two so that the machine's noise falls on both. Prints
# each round's figures, the medians and the ratios rdmago/C, and the
# system's TCP congestion control: where it paces (bbr), C's 1 MiB
# figure is about a third of what it is with cubic, while rdmago's
# provider asks for reno on loopback connections.
#
#   scripts/fi_pingpong_bench.sh [ROUNDS]     (default 5)
#
# Needs fi_pingpong (apt-get install libfabric-bin).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
rounds=$(rounds_arg "${1:-5}" "$0 [ROUNDS]")
command -v fi_pingpong >/dev/null || { echo "fi_pingpong is not installed (apt-get install libfabric-bin)" >&2; exit 1; }
bin=$(mktemp -d)/rdmago
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/rdmago

port=47600
# pair PROG ARGS...: one server and one client; prints the client's row,
# or nothing if the pair failed (each side has a minute).
pair() {
	local prog=$1; shift
	port=$((port + 10)) # the tcp provider's servers take the next ports too
	if [ "$prog" = c ]; then set -- fi_pingpong "$@"; else set -- "$bin" fi_pingpong "$@"; fi
	timeout 60 "$@" -B "$port" >/dev/null 2>&1 &
	local srv=$!
	if wait_listen "$port"; then
		timeout 60 "$@" -P "$port" 127.0.0.1 | awk 'NR == 2' || true
	else
		kill "$srv" 2>/dev/null || true
	fi
	wait "$srv" 2>/dev/null || true
}

median() { sort -g | awk 'NF {v[++n] = $1} END {if (n) print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; else print "nan"}'; }

declare -A lat bw
for r in $(seq "$rounds"); do
	for prog in c go; do
		l=$(pair $prog -p tcp -e msg -S 64 -I 20000 | awk '{print $7}')
		b=$(pair $prog -p tcp -e msg -S 1048576 -I 1000 | awk '{print $6}')
		lat[$prog]+="$l "
		bw[$prog]+="$b "
		printf 'round %d %-6s 64 B %8s usec/xfer   1 MiB %9s MB/sec\n' "$r" "$prog" "${l:-failed}" "${b:-failed}"
	done
done
for prog in c go; do
	lm=$(echo ${lat[$prog]} | tr ' ' '\n' | median)
	bm=$(echo ${bw[$prog]} | tr ' ' '\n' | median)
	printf 'median %-6s 64 B %8s usec/xfer   1 MiB %9s MB/sec\n' "$prog" "$lm" "$bm"
	eval "lm_$prog=$lm bm_$prog=$bm"
done
cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo unknown)
echo "congestion control: the system's is $cc; C keeps it, rdmago asks for reno on connections to this host (fabric/internal/hostcc)"
awk -v lg="$lm_go" -v lc="$lm_c" -v bg="$bm_go" -v bc="$bm_c" '
	function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2fx", a / b) : "n/a" }
	BEGIN { printf "rdmago/C: latency %s (goal <= 0.90), bandwidth %s (goal >= 1.10)\n", ratio(lg, lc), ratio(bg, bc) }'
