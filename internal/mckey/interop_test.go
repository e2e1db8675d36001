package mckey

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// TestInteropWithLinuxMckey runs `rdmago mckey` against rdma-core's mckey
// on Linux Soft-RoCE in vm1 of the interop harness, each as sender and as
// receiver, with two IDs per side: each joins the group through its
// connection manager (on Linux, the kernel's rdma_cm, which sends an IGMP
// join), and the receivers get every datagram. IPv4 only: Linux 6.1's
// rdma_cm refuses IPv6 groups on RoCE (rdma_join_multicast fails with
// ENOTSUPP, 524), so the IPv6 path is tested rdmago to rdmago.
// It runs only when RDMAGO_INTEROP_VM names the harness's vm script and
// `vm up 1` has been run.
func TestInteropWithLinuxMckey(t *testing.T) {
	vm := vmtest.VM(t, "Linux mckey")
	bin := vmtest.BuildRdmago(t)
	for i, tc := range []struct{ name, host, guest, group string }{
		{"IPv4", "10.77.0.1", "10.77.0.11", "239.77.0.%d"},
	} {
		for j, rdmagoSends := range []bool{true, false} {
			dir := "rdmago sends to mckey"
			if !rdmagoSends {
				dir = "mckey sends to rdmago"
			}
			t.Run(tc.name+" "+dir, func(t *testing.T) {
				group := fmt.Sprintf(tc.group, 10+2*i+j)
				const flags = "-c 2 -C 50 -S 1000"
				host := func(args string) *exec.Cmd {
					return exec.Command(vm, append([]string{"host", "env", "RDMAGO_RXE_ADDR=" + tc.host, "timeout", vmtest.Timeout, bin, "mckey"},
						strings.Fields(fmt.Sprintf("%s -m %s -b %s %s", args, group, tc.host, flags))...)...)
				}
				guest := func(args string) *exec.Cmd {
					return vmtest.Guest(vm, "mckey", fmt.Sprintf("stdbuf -oL mckey %s -m %s -b %s %s", args, group, tc.guest, flags))
				}
				recv, send := guest(""), host("-s")
				if !rdmagoSends {
					recv, send = host(""), guest("-s")
				}
				recvOut, sendOut := vmtest.RunPair(t, recv, send, 2*time.Second)
				t.Logf("--- receiver:\n%s--- sender:\n%s", recvOut, sendOut)
				dgid := group // inet_ntop of the MGID: an IPv4 group is mapped
				if !strings.Contains(group, ":") {
					dgid = "::ffff:" + group
				}
				joined := "mckey: joined dgid: " + dgid + " mlid 0x0 sl 0\n"
				for _, out := range []string{recvOut, sendOut} {
					if strings.Count(out, joined) != 2 {
						t.Errorf("want two %q lines", joined)
					}
					if !strings.Contains(out, "data transfers complete\ntest complete\nreturn status 0\n") {
						t.Errorf("a side did not complete")
					}
				}
				if !strings.Contains(recvOut, "receiving data transfers\n") {
					t.Errorf("the receiver did not receive")
				}
			})
		}
	}
}
