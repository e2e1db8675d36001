#!/usr/bin/env bash
# Every interop suite against the C originals, one after the other, with
# one summary line a suite:
#
#   scripts/interop.sh [VM-HARNESS] [ROCESIM-WORKTREE]
#
#   host       rdmago fi_pingpong -p tcp (msg, rdm, tagged, every size)
#              against libfabric's fi_pingpong on loopback, both ways
#   vm         with the harness's Soft-RoCE VMs (default
#              ../shared/interop/vm; needs root): ibv_*_pingpong, rping,
#              udaddy, mckey, rdma_server/rdma_client, fi_pingpong -p verbs
#              (msg, dgram, rdm with SAR and rendezvous), perftest (-R
#              included), rstream, riostream, rdmago nvmeof against Linux's
#              NVMe/RDMA host and target, and rdmacore's tools built
#              -tags rdmacore inside vm1 against vm2
#   rocesim    datenlord/roce-sim's cases with rdmago as the device under
#              test, when a roce-sim work tree is given (needs root)
#
# Logs go to $OUT (default a new directory under /tmp); the exit status is
# 0 only when every suite that ran passed. The VMs are brought down at the
# end.
set -uo pipefail
cd "$(dirname "$0")/.."
vm=${1:-$PWD/../shared/interop/vm}
rocesim=${2:-}
out=${OUT:-$(mktemp -d /tmp/rdmago-interop.XXXXXX)}
mkdir -p "$out" || exit 1
status=0

summary() { # name log: one line of counts from a go test -v log
	local name=$1 log=$2 pass fail skip
	pass=$(grep -c -- '--- PASS' "$log")
	fail=$(grep -c -- '--- FAIL' "$log")
	skip=$(grep -c -- '--- SKIP' "$log")
	printf '%-10s %4d passed %3d failed %3d skipped   (%s)\n' "$name" "$pass" "$fail" "$skip" "$log"
	grep -- '--- FAIL' "$log" | sed 's/^/           /'
}

go test -count=1 -v -run 'TestInteropWithCFiPingpong' ./internal/fipingpong >"$out/host.log" 2>&1 || status=1
summary host "$out/host.log"

if [ -x "$vm" ]; then
	"$vm" build >"$out/vm-build.log" 2>&1 && "$vm" up 2 >"$out/vm-up.log" 2>&1 || {
		echo "vm: the harness did not come up; see $out/vm-up.log" >&2
		exit 1
	}
	RDMAGO_INTEROP_VM=$vm go test -count=1 -p 1 -timeout 60m -run Interop -v \
		./internal/pingpong ./internal/rping ./internal/udaddy ./examples ./rdmacore \
		./internal/fipingpong ./internal/perftest ./internal/rstream ./internal/riostream \
		./internal/mckey ./internal/nvmeoftool >"$out/vm.log" 2>&1 || status=1
	summary vm "$out/vm.log"
	"$vm" down >/dev/null 2>&1
else
	echo "vm         skipped: no harness at $vm"
fi

if [ -n "$rocesim" ]; then
	interop/rocesim/run.sh "$rocesim" >"$out/rocesim.log" 2>&1 || status=1
	printf '%-10s %s   (%s)\n' rocesim "$(grep -E '^[0-9]+ passed' "$out/rocesim.log" | tail -1)" "$out/rocesim.log"
	grep '^FAIL' "$out/rocesim.log" | sed 's/^/           /'
fi
exit $status
