package fipingpong

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// TestInteropVerbsWithLinuxSoftRoCE runs `rdmago fi_pingpong -p verbs` on
// the host side of the VM harness (the software device on 10.77.0.1)
// against libfabric's fi_pingpong with its verbs provider on the kernel's
// Soft-RoCE in vm1, both ways, with the data check on: FI_EP_MSG (RC
// through rdma_cm) and the default FI_EP_DGRAM (UD).
//
// C's provider names its UD endpoints by the GID at FI_VERBS_GID_IDX, 0
// by default: on the kernel's rxe that is the link-local IPv6 GID, while
// the software device on the host side has only its IPv4 one. The C side
// therefore runs with FI_VERBS_GID_IDX=1, its IPv4 GID, as perftest's
// runs take -x 1. And C's rxm (verbs;ofi_rxm, FI_EP_RDM) sizes the CQ
// of its MSG endpoints for FI_UNIVERSE_SIZE peers, 256 by default, past
// the 32767 entries of rxe's CQs, so that its fi_enable fails even
// between two C programs; FI_UNIVERSE_SIZE=32 fits.
func TestInteropVerbsWithLinuxSoftRoCE(t *testing.T) {
	vm := vmtest.VM(t, "libfabric's verbs provider")
	bin := vmtest.BuildRdmago(t)
	for _, c := range []struct {
		flags string
		rows  int
	}{
		{"-e msg -S 64 -I 200", 1},
		{"-e msg -S 4096 -I 100", 1},
		{"-e msg -S 65536 -I 50", 1},
		{"-S 64 -I 200", 1}, // FI_EP_DGRAM, the default
		{"-I 50", 3},        // 64, 256 and 1k: the sizes up to the MTU
		{"-e rdm -S 64 -I 200", 1},
		{"-e rdm -S 65536 -I 50", 1},           // in four 16 KiB segments (SAR)
		{"-e rdm -I 4", 6},                     // up to 1 MiB: eager, SAR and rendezvous (RDMA READ)
		{"-e rdm -m tagged -S 4096 -I 100", 1}, // tag 1234 in rxm's header
	} {
		for _, goServes := range []bool{true, false} {
			name := fmt.Sprintf("%s/go-serves=%v", c.flags, goServes)
			t.Run(name, func(t *testing.T) {
				flags := "-p verbs -c " + c.flags
				host := func(args string) *exec.Cmd { return vmtest.Host(vm, bin, "fi_pingpong", strings.Fields(args)...) }
				guest := func(args string) *exec.Cmd {
					return vmtest.Guest(vm, "fi_pingpong", "env FI_VERBS_GID_IDX=1 FI_UNIVERSE_SIZE=32 fi_pingpong "+args)
				}
				srv, cli := host(flags), guest(flags+" 10.77.0.1")
				ready := func() { time.Sleep(3 * time.Second) }
				if !goServes {
					// The emulated guest may take longer than that
					// to listen on the control port.
					srv, cli = guest(flags), host(flags+" 10.77.0.11")
					ready = vmtest.GuestListening(vm, 47592, 30*time.Second)
				}
				srvOut, cliOut := vmtest.RunPairAfter(t, srv, cli, ready)
				sr, cr := rows(srvOut), rows(cliOut)
				if len(sr) != c.rows || fmt.Sprint(sr) != fmt.Sprint(cr) {
					t.Fatalf("rows differ\nserver:\n%s\nclient:\n%s", srvOut, cliOut)
				}
				t.Logf("server: %s", strings.TrimSpace(srvOut))
				t.Logf("client: %s", strings.TrimSpace(cliOut))
			})
		}
	}
}
