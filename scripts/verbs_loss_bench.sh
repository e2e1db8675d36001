#!/usr/bin/env bash
# Times fi_pingpong -p verbs under packet loss against libfabric's, with
# the interop harness's Soft-RoCE VMs: netem drops LOSS (default 1%) of
# the packets vm1 sends, and each round runs, back to back,
#
#   C client (vm1)       -> C server (vm2)        the anchor
#   C client (vm1)       -> rdmago server (host)
#   rdmago client (host) -> C server (vm1)
#
# and prints each pair's wall-clock seconds and the ratio to the anchor.
#
#   scripts/verbs_loss_bench.sh [ROUNDS [FI_PINGPONG FLAGS...]]
#       (default: 1 round of -e msg -S 4096 -I 500)
#
# Needs root and the harness up (VM=../shared/interop/vm by default:
# "$VM" up 2).
set -uo pipefail
cd "$(dirname "$0")/.."
vm=${VM:-$PWD/../shared/interop/vm}
rounds=${1:-1}
case $rounds in
''|*[!0-9]*|0) echo "usage: $0 [ROUNDS [FI_PINGPONG FLAGS...]] (ROUNDS a positive number)" >&2; exit 2 ;;
esac
shift || true
[ -x "$vm" ] || { echo "no interop harness at $vm (set VM)" >&2; exit 2; }
[ $# -gt 0 ] || set -- -e msg -S 4096 -I 500
flags="-p verbs $*"
cenv="env FI_VERBS_GID_IDX=1 FI_UNIVERSE_SIZE=32" # see internal/fipingpong's interop test
limit=180
dir=$(mktemp -d)
trap '"$vm" exec 1 "tc qdisc del dev eth0 root" >/dev/null 2>&1; rm -rf "$dir"' EXIT
bin=$dir/rdmago
go build -o "$bin" ./cmd/rdmago || exit 1
"$vm" exec 1 "tc qdisc del dev eth0 root 2>/dev/null; tc qdisc add dev eth0 root netem loss ${LOSS:-1%}" || exit 1

# timed CMD...: runs CMD, prints its seconds, or "failed" and its output's tail.
timed() {
	local s e
	s=$(date +%s.%N)
	if "$@" >"$dir/out" 2>&1; then
		e=$(date +%s.%N)
		echo "$e - $s" | bc
	else
		echo failed
		tail -3 "$dir/out" >&2
	fi
}
# pair SERVER-CMD CLIENT-CMD...: starts the server, waits, times the client.
pair() {
	local srv=$1; shift
	eval "$srv" >"$dir/srv" 2>&1 &
	local pid=$!
	sleep 4
	timed "$@"
	wait "$pid" || tail -3 "$dir/srv" >&2
}
for r in $(seq "$rounds"); do
	c=$(pair "'$vm' exec 2 'pkill -x fi_pingpong; timeout $limit $cenv fi_pingpong $flags'" \
		"$vm" exec 1 "timeout $limit $cenv fi_pingpong $flags 10.77.0.12")
	gs=$(pair "'$vm' host env RDMAGO_RXE_ADDR=10.77.0.1 timeout $limit '$bin' fi_pingpong $flags" \
		"$vm" exec 1 "timeout $limit $cenv fi_pingpong $flags 10.77.0.1")
	gc=$(pair "'$vm' exec 1 'pkill -x fi_pingpong; timeout $limit $cenv fi_pingpong $flags'" \
		"$vm" host env RDMAGO_RXE_ADDR=10.77.0.1 timeout "$limit" "$bin" fi_pingpong $flags 10.77.0.11)
	awk -v r="$r" -v c="$c" -v gs="$gs" -v gc="$gc" 'function s(x) { return x + 0 > 0 ? sprintf("%.1f s", x) : x }
		function ratio(x) { return (x + 0 > 0 && c + 0 > 0) ? sprintf("%.2fx", x / c) : "-" }
		BEGIN { printf "round %d  C<->C %s  C->rdmago %s (%s)  rdmago->C %s (%s)\n", r, s(c), s(gs), ratio(gs), s(gc), ratio(gc) }'
done
echo "goal: each at most 1.20x C<->C"
