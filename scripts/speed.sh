#!/usr/bin/env bash
# The software device's speed beside its anchors, measured back to back in
# one run on loopback so that the machine's noise falls on both: each
# figure the software device's speed is held to, with its anchor
# and the ratio.
#
#   scripts/speed.sh [ROUNDS]     (default 3; each figure is the median)
#
#   latency     rdmago ib_send_lat -s 8, busy-polling (t_typical: half a
#               round trip)
#               vs C fi_pingpong -p tcp -e msg -S 64 (usec/xfer), and vs
#               the machine's floor: scripts/udp_floor.c, two C processes
#               busy-polling UDP sockets over loopback (needs cc); and vs
#               the floor of the packets the device moves (udp_floor ...
#               ack): each 24-byte message sent with a 20-byte ACK in one
#               GSO send, as the device answers with the ACK it held
#   rate        rdmago ib_write_bw / ib_send_bw -s 64 -t 128 -l 16 (Mpps):
#               200,000 messages (about 0.2 s, so the first milliseconds,
#               slower while the two processes' threads settle on the
#               CPUs, weigh), and for 4 s (-D 4), which leaves out the
#               first and last second as perftest does: the steady rate
#   bandwidth   rdmago ib_write_bw / ib_read_bw / ib_send_bw -s 1 MiB (MB/s)
#               vs iperf3, one TCP stream, with the system's congestion
#               control and with reno. A pacing one (bbr) slows TCP on
#               loopback to about a third (fabric/internal/hostcc says
#               why), so where the system's is bbr the first anchor is
#               low and the second is kernel TCP at its best
#   setup       rdmacm Dial+Accept vs TCP connect+accept (go test -bench),
#               both ends in one process; and with the listener in a
#               process of its own (ProcsDialAccept), vs TCP the same way
#               and vs one UDP round trip between the two processes: what
#               a REP costs at least, as it waits for the listening
#               program's rdma_accept (TCP's handshake does not wait for
#               the program)
#   idle QP     bytes of heap per connected, idle RC QP (go test -bench)
#   loss        1 MiB RDMA WRITE goodput at 0.1, 1, 5 and 10 % random
#               loss vs lossless, in-memory network (go test -bench)
#   lost tail   an 8-byte WRITE whose only packet is lost once, timeout
#               code 14: vs that timeout, 67 ms, which is how long Linux
#               rxe waits before it sends the packet again (go test -bench)
#
# Needs fi_pingpong and iperf3 (apt-get install libfabric-bin iperf3).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
rounds=$(rounds_arg "${1:-3}" "$0 [ROUNDS]")
for t in fi_pingpong iperf3; do
	command -v "$t" >/dev/null || { echo "$t is not installed (apt-get install libfabric-bin iperf3)" >&2; exit 1; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bin=$dir/rdmago
go build -o "$bin" ./cmd/rdmago
floorbin=
if command -v cc >/dev/null && cc -O2 -o "$dir/udp_floor" scripts/udp_floor.c; then
	floorbin=$dir/udp_floor
fi

median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# Each pair runs under a time limit: a run that stalls counts as missing
# (and the table says so) rather than holding up the rest.
limit=60
# The perftest pairs run as two hosts would: each process on a device of
# its own. Both use rxe_lo, the server at 127.0.0.2 (RDMAGO_RXE_ADDR), the
# client at 127.0.0.1; two processes on one device address share its UDP
# port, one forwarding the other's packets, which is not what is measured
# here.
cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo unknown)
srvaddr=127.0.0.2
echo "perftest pairs: server on rxe_lo at $srvaddr, client on rxe_lo at 127.0.0.1" >&2

# perf PORT TOOL ARGS...: one rdmago perftest server and client; prints
# the client's result row.
perf() {
	local port=$1 tool=$2; shift 2
	RDMAGO_RXE_ADDR=$srvaddr timeout "$limit" "$bin" "$tool" -d rxe_lo -p "$port" "$@" >/dev/null 2>&1 &
	local srv=$!
	if wait_listen "$port"; then
		timeout "$limit" "$bin" "$tool" -d rxe_lo -p "$port" "$@" "$srvaddr" | awk '/^ *[0-9]+ +[0-9]+ / {print; exit}' || true
	else
		kill "$srv" 2>/dev/null || true
	fi
	wait "$srv" 2>/dev/null || true
}
# fipp PORT ARGS...: C fi_pingpong server and client; prints the client's row.
fipp() {
	local port=$1; shift
	timeout "$limit" fi_pingpong "$@" -B "$port" >/dev/null 2>&1 &
	local srv=$!
	if wait_listen "$port"; then
		timeout "$limit" fi_pingpong "$@" -P "$port" 127.0.0.1 | awk 'NR == 2' || true
	else
		kill "$srv" 2>/dev/null || true
	fi
	wait "$srv" 2>/dev/null || true
}
# floor PORT SIZE [ack]: the C UDP ping-pong's half round trip, in us.
floor() {
	[ -n "$floorbin" ] || return 0
	timeout "$limit" "$floorbin" server "$1" ${3:-} &
	local srv=$!
	sleep 0.2
	timeout "$limit" "$floorbin" client "$1" "$2" 200000 ${3:-} || true
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}
# iperf PORT [CC]: one iperf3 TCP stream for 3 s, with congestion
# control CC if given (else the system's); prints Mbit/s.
iperf() {
	timeout "$limit" iperf3 -s -1 -p "$1" >/dev/null 2>&1 &
	local srv=$!
	if wait_listen "$1"; then
		timeout "$limit" iperf3 -c 127.0.0.1 -p "$1" -t 3 -f m ${2:+-C "$2"} | awk '/receiver/ {print $7}' || true
	else
		kill "$srv" 2>/dev/null || true
	fi
	wait "$srv" 2>/dev/null || true
}

declare -A v
add() { v[$1]+="$2 "; }
port=47700
for r in $(seq "$rounds"); do
	port=$((port + 20))
	add lat_c "$(fipp $((port + 1)) -p tcp -e msg -S 64 -I 20000 | awk '{print $7}')"
	add lat_go "$(perf $((port + 2)) ib_send_lat -s 8 -n 20000 | awk '{print $5}')"
	add lat_floor "$(floor $((port + 11)) 8)"
	add lat_pair "$(floor $((port + 12)) 24 ack)"
	add rate_write "$(perf $((port + 3)) ib_write_bw -s 64 -t 128 -l 16 -n 200000 | awk '{print $5}')"
	add rate_send "$(perf $((port + 4)) ib_send_bw -s 64 -t 128 -l 16 -n 200000 | awk '{print $5}')"
	add rate_write_d "$(perf $((port + 9)) ib_write_bw -s 64 -t 128 -l 16 -D 4 | awk '{print $5}')"
	add rate_send_d "$(perf $((port + 10)) ib_send_bw -s 64 -t 128 -l 16 -D 4 | awk '{print $5}')"
	add bw_tcp "$(iperf $((port + 5)) | awk '{print $1 / 8}')"
	add bw_reno "$(iperf $((port + 13)) reno | awk '{print $1 / 8}')"
	add bw_write "$(perf $((port + 6)) ib_write_bw -s 1048576 -n 2000 | awk '{print $4}')"
	add bw_read "$(perf $((port + 7)) ib_read_bw -s 1048576 -n 2000 | awk '{print $4}')"
	add bw_send "$(perf $((port + 8)) ib_send_bw -s 1048576 -n 2000 | awk '{print $4}')"
	echo "round $r done" >&2
done
# m NAME: the median of a figure's rounds, or "nan" if every round stalled.
m() {
	local x
	x=$(echo ${v[$1]:-} | tr ' ' '\n' | { grep . || true; } | median)
	echo "${x:-nan}"
}

# 2000 connections a run: at 200 the first, cold ones (for TCP too) weigh
# enough that rounds differed by half.
bench=$(go test -run XXX -bench '^Benchmark(TCP)?DialAccept$' -benchtime 2000x -count "$rounds" ./rdmacm 2>/dev/null)
dial_go=$(echo "$bench" | awk '/^BenchmarkDialAccept(-|[ \t])/ {print $3 / 1000}' | median)
dial_tcp=$(echo "$bench" | awk '/^BenchmarkTCPDialAccept(-|[ \t])/ {print $3 / 1000}' | median)
bench=$(go test -run '^$' -bench 'ProcsDialAccept' -benchtime 2000x -count "$rounds" ./rdmacm 2>/dev/null)
pdial() { echo "$bench" | awk -v p="^BenchmarkProcsDialAccept/$1(-|[ \t])" '$0 ~ p {print $3 / 1000}' | median; }
pdial_go=$(pdial rdmacm)
pdial_tcp=$(pdial tcp)
pdial_udp=$(pdial udp)
bench=$(go test -run XXX -bench 'IdleQPMemory|WriteUnderLoss|LostLastPacket' -count "$rounds" ./rxe 2>/dev/null)
idle=$(echo "$bench" | awk '/^BenchmarkIdleQPMemory/ {for (i = 1; i < NF; i++) if ($(i+1) == "B/QP") print $i}' | median)
loss0=$(echo "$bench" | awk '/^BenchmarkWriteUnderLoss\/loss=0%/ {for (i = 1; i < NF; i++) if ($(i+1) == "MB/s") print $i}' | median)
lossat() { echo "$bench" | awk -v p="^BenchmarkWriteUnderLoss/loss=$1%" '$0 ~ p {for (i = 1; i < NF; i++) if ($(i+1) == "MB/s") print $i}' | median; }
loss01=$(lossat 0.1)
loss1=$(lossat 1)
loss5=$(lossat 5)
loss10=$(lossat 10)
tail=$(echo "$bench" | awk '/^BenchmarkLostLastPacket/ {print $3 / 1000}' | median)

awk -v lc="$(m lat_c)" -v lg="$(m lat_go)" -v rw="$(m rate_write)" -v rs="$(m rate_send)" \
	-v rwd="$(m rate_write_d)" -v rsd="$(m rate_send_d)" \
	-v bt="$(m bw_tcp)" -v btr="$(m bw_reno)" -v cc="$cc" -v bwr="$(m bw_write)" -v brd="$(m bw_read)" -v bsd="$(m bw_send)" \
	-v dg="$dial_go" -v dt="$dial_tcp" -v pdg="$pdial_go" -v pdt="$pdial_tcp" -v pdu="$pdial_udp" -v idle="$idle" -v l0="$loss0" -v l01="$loss01" -v l1="$loss1" \
	-v l5="$loss5" -v l10="$loss10" -v fl="$(m lat_floor)" -v fp="$(m lat_pair)" -v tl="$tail" 'BEGIN {
	printf "%-40s %14s %22s %8s  %s\n", "figure", "rdmago", "anchor (same run)", "ratio", "goal"
	printf "%-40s %11.1f us %19.1f us %7.2fx  %s\n", "8 B SEND, half a round trip", lg, lc, lg / lc, "<= 0.90x fi_pingpong tcp"
	printf "%-40s %11.1f us %19.2f us %7.2fx  %s\n", "8 B SEND, half a round trip (vs floor)", lg, fl, lg / fl, "<= 1.15x C UDP ping-pong"
	printf "%-40s %11.1f us %19.2f us %7.2fx  %s\n", "8 B SEND (vs floor of its packets)", lg, fp, lg / fp, "- (C: message + ACK per GSO send)"
	printf "%-40s %9.3f Mpps %22s %8s  %s\n", "64 B RDMA WRITE rate (128 in flight)", rw, "-", "-", ">= 1 Mpps"
	printf "%-40s %9.3f Mpps %22s %8s  %s\n", "64 B SEND rate (128 in flight)", rs, "-", "-", ">= 1 Mpps"
	printf "%-40s %9.3f Mpps %22s %8s  %s\n", "64 B RDMA WRITE rate, steady (-D 4)", rwd, "-", "-", ">= 1.2 Mpps"
	printf "%-40s %9.3f Mpps %22s %8s  %s\n", "64 B SEND rate, steady (-D 4)", rsd, "-", "-", ">= 1 Mpps"
	printf "%-40s %9.0f MB/s %17.0f MB/s %7.2fx  %s\n", "1 MiB RDMA WRITE (iperf3: " cc ")", bwr, bt, bwr / bt, ">= 2.00x iperf3"
	printf "%-40s %9.0f MB/s %17.0f MB/s %7.2fx  %s\n", "1 MiB RDMA WRITE (iperf3 -C reno)", bwr, btr, bwr / btr, "- (kernel TCP at its best)"
	printf "%-40s %9.0f MB/s %17.0f MB/s %7.2fx  %s\n", "1 MiB RDMA READ (vs WRITE)", brd, bwr, brd / bwr, ">= 0.90x WRITE"
	printf "%-40s %9.0f MB/s %17.0f MB/s %7.2fx  %s\n", "1 MiB SEND (vs WRITE)", bsd, bwr, bsd / bwr, ">= 0.90x WRITE"
	printf "%-40s %11.0f us %19.0f us %7.2fx  %s\n", "rdmacm Dial+Accept (vs TCP)", dg, dt, dg / dt, "<= 1.50x TCP"
	printf "%-40s %11.0f us %19.0f us %7.2fx  %s\n", "Dial+Accept, 2 processes (vs TCP)", pdg, pdt, pdg / pdt, "-"
	printf "%-40s %11.0f us %19.0f us %7.2fx  %s\n", "Dial+Accept, 2 processes (vs UDP RTT)", pdg, pdu, pdg / pdu, "- (a REP waits for rdma_accept)"
	printf "%-40s %12.0f B %22s %8s  %s\n", "memory per idle RC QP", idle, "-", "-", "<= 16384 B"
	printf "%-40s %9.0f MB/s %17.0f MB/s %7.2fx  %s\n", "1 MiB WRITE at 0.1 % loss (vs lossless)", l01, l0, l01 / l0, "-"
	printf "%-40s %9.0f MB/s %17.0f MB/s %7.2fx  %s\n", "1 MiB WRITE at 1 % loss (vs lossless)", l1, l0, l1 / l0, ">= 0.70x"
	printf "%-40s %9.0f MB/s %17.0f MB/s %7.2fx  %s\n", "1 MiB WRITE at 5 % loss (vs lossless)", l5, l0, l5 / l0, ">= 0.30x"
	printf "%-40s %9.0f MB/s %17.0f MB/s %7.2fx  %s\n", "1 MiB WRITE at 10 % loss (vs lossless)", l10, l0, l10 / l0, "-"
	printf "%-40s %11.0f us %19.0f us %7.2fx  %s\n", "lost last packet (vs timeout 14, Linux)", tl, 4.096 * 16384, tl / (4.096 * 16384), "<= 2.00x Linux rxe"
}'
