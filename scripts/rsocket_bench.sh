#!/usr/bin/env bash
# net.Conn over RDMA beside kernel TCP, two processes on loopback, each
# figure with its anchor measured in the same run (medians of ROUNDS):
#
#   scripts/rsocket_bench.sh [ROUNDS]     (default 5)
#
#   round trip   rsocket.Conn 64 B echo vs net.TCPConn's (go test -bench
#                ProcsRoundTrip64B), and vs the device's own SEND round
#                trip (rdmago ib_send_lat -s 64, twice t_typical)
#   stream       64 KiB Writes one way (ProcsWrite64KiB), and io.Copy of
#                a file (ProcsCopyFile: rsocket's ReadFrom vs TCP's
#                sendfile)
#   many         1,000 connections of one process: bytes each costs over
#                its buffers, and the process's CPU while they idle
#   gRPC         unary calls and a 64 KiB stream (grpcrdma/cmd/grpcbench)
#
# The server of each pair runs on its own software device at 127.0.0.2
# (RDMAGO_RXE_ADDR), the client at 127.0.0.1, as two hosts would.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
rounds=$(rounds_arg "${1:-5}" "$0 [ROUNDS]")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/rdmago" ./cmd/rdmago
go test -c -o "$dir/rsocket.test" ./rsocket
(cd grpcrdma && go build -o "$dir/grpcbench" ./cmd/grpcbench)

median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "nan"}'; }
declare -A v
add() { [ -n "$2" ] && v[$1]+="$2 " || true; }
m() { echo ${v[$1]:-} | tr ' ' '\n' | { grep . || true; } | median; }
# metric BENCH UNIT: a figure of one line of go test -bench output.
metric() { awk -v b="$1" -v u="$2" '$1 ~ b {for (i = 2; i < NF; i++) if ($(i+1) == u) print $i}'; }

limit=60
lat() { # the device's 64 B SEND round trip, µs
	RDMAGO_RXE_ADDR=127.0.0.2 timeout $limit "$dir/rdmago" ib_send_lat -s 64 -n 20000 -p "$1" >/dev/null 2>&1 &
	local srv=$!
	if wait_listen "$1"; then
		RDMAGO_RXE_ADDR=127.0.0.1 timeout $limit "$dir/rdmago" ib_send_lat -s 64 -n 20000 -p "$1" 127.0.0.2 |
			awk '/^ *64 +[0-9]+ / {print 2 * $5; exit}' || true
	else
		kill "$srv" 2>/dev/null || true
	fi
	wait "$srv" 2>/dev/null || true
}
grpc() { # grpcbench OP [-tcp]: µs per call, or MB/s
	RDMAGO_RXE_ADDR=127.0.0.2 timeout $limit "$dir/grpcbench" -s ${3:-} -a "127.0.0.2:$2" >/dev/null 2>&1 &
	local srv=$!
	sleep 0.7
	RDMAGO_RXE_ADDR=127.0.0.1 timeout $limit "$dir/grpcbench" -op "$1" ${3:-} -a "127.0.0.2:$2" |
		awk '{for (i = 1; i < NF; i++) if ($(i+1) == "µs/call," || $(i+1) == "µs/call" || $(i+1) == "MB/s") print $i}' | tail -1 || true
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}

port=18600
for r in $(seq "$rounds"); do
	port=$((port + 10))
	out=$(cd "$dir" && ./rsocket.test -test.run '^$' -test.bench 'Procs(RoundTrip64B|Write64KiB|CopyFile)' -test.benchtime 2s 2>/dev/null)
	add rt_rs "$(echo "$out" | metric 'ProcsRoundTrip64B/rsocket' ns/op | awk '{print $1 / 1000}')"
	add rt_tcp "$(echo "$out" | metric 'ProcsRoundTrip64B/tcp' ns/op | awk '{print $1 / 1000}')"
	add wr_rs "$(echo "$out" | metric 'ProcsWrite64KiB/rsocket' MB/s)"
	add wr_tcp "$(echo "$out" | metric 'ProcsWrite64KiB/tcp' MB/s)"
	add cp_rs "$(echo "$out" | metric 'ProcsCopyFile/rsocket' MB/s)"
	add cp_tcp "$(echo "$out" | metric 'ProcsCopyFile/tcp' MB/s)"
	add dev "$(lat $((port + 1)))"
	add gu_rs "$(grpc unary $((port + 2)))"
	add gu_tcp "$(grpc unary $((port + 3)) -tcp)"
	add gs_rs "$(grpc stream $((port + 4)))"
	add gs_tcp "$(grpc stream $((port + 5)) -tcp)"
	echo "round $r done" >&2
done
out=$(cd "$dir" && ./rsocket.test -test.run '^$' -test.bench 'ProcsManyConns' -test.benchtime 20x 2>/dev/null)
many_d=$(echo "$out" | metric 'ManyConns/default' B/conn-over-buffers)
many_s=$(echo "$out" | metric 'ManyConns/16KiB' B/conn-over-buffers)
idle_d=$(echo "$out" | metric 'ManyConns/default' idle-CPU-%)

awk -v rr="$(m rt_rs)" -v rt="$(m rt_tcp)" -v dv="$(m dev)" -v wr="$(m wr_rs)" -v wt="$(m wr_tcp)" \
	-v cr="$(m cp_rs)" -v ct="$(m cp_tcp)" -v gur="$(m gu_rs)" -v gut="$(m gu_tcp)" -v gsr="$(m gs_rs)" -v gst="$(m gs_tcp)" \
	-v md="${many_d:-nan}" -v ms="${many_s:-nan}" -v idle="${idle_d:-nan}" 'BEGIN {
	printf "%-44s %12s %20s %8s  %s\n", "figure (two processes)", "rsocket", "anchor (same run)", "ratio", "goal"
	printf "%-44s %9.1f us %14.1f us TCP %7.2fx  %s\n", "64 B echo round trip", rr, rt, rr / rt, "<= 1.00x TCP"
	printf "%-44s %9.1f us %11.1f us device %7.2fx  %s\n", "64 B echo round trip (vs ib_send_lat RTT)", rr, dv, rr / dv, "<= 1.30x"
	printf "%-44s %7.0f MB/s %12.0f MB/s TCP %7.2fx  %s\n", "64 KiB writes, one way", wr, wt, wr / wt, ">= 1.50x TCP"
	printf "%-44s %7.0f MB/s %9.0f MB/s writes %7.2fx  %s\n", "io.Copy from a file (vs 64 KiB writes)", cr, wr, cr / wr, "~1.00x"
	printf "%-44s %7.0f MB/s %12.0f MB/s TCP %7.2fx  %s\n", "io.Copy from a file (vs TCP sendfile)", cr, ct, cr / ct, "-"
	printf "%-44s %9.0f B %20s %8s  %s\n", "1,000 conns: bytes over buffers (defaults)", md, "-", "-", "<= 16384 B"
	printf "%-44s %9.0f B %20s %8s  %s\n", "1,000 conns: bytes over buffers (16 KiB)", ms, "-", "-", "<= 16384 B"
	printf "%-44s %10.2f %% %20s %8s  %s\n", "1,000 idle conns: CPU of one core", idle, "-", "-", "<= 1 % per conn"
	printf "%-44s %9.1f us %14.1f us TCP %7.2fx  %s\n", "gRPC unary call", gur, gut, gur / gut, "-"
	printf "%-44s %7.0f MB/s %12.0f MB/s TCP %7.2fx  %s\n", "gRPC 64 KiB stream, one way", gsr, gst, gsr / gst, "-"
}'
