package pingpong

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// gids picks the GIDs a ping-pong runs over: the GID index on each side.
type gids struct {
	name        string
	env         string // RDMAGO_RXE_ADDR on the host side, if any
	host, guest string
}

// The harness's GID tables: the host side's rxe_br0 lists br0's link-local
// address, 10.77.0.1 and fd77::1 (in that order, as Linux does), and vm1's
// rxe0 fe80::…, ::ffff:10.77.0.11 and fd77::11.
var (
	gidsIPv4      = gids{"IPv4", "RDMAGO_RXE_ADDR=10.77.0.1", "0", "1"}
	gidsLinkLocal = gids{"IPv6 link-local", "", "0", "0"}
	gidsGlobal6   = gids{"IPv6 global", "", "2", "2"}
)

// interopRun runs one ping-pong between `rdmago <transport>_pingpong` on
// the host side of the harness and rdma-core's ibv_<transport>_pingpong in
// vm1 over the IPv4 GIDs, with the flags in common; the client side adds
// -e, so that each implementation is run both polling and sleeping on
// events.
func interopRun(t *testing.T, vm, bin string, tr Transport, common string, rdmagoServes bool) {
	t.Helper()
	interopRunGIDs(t, vm, bin, tr, common, rdmagoServes, gidsIPv4)
}

// interopRunGIDs is interopRun over the GIDs g picks. The out-of-band
// exchange always goes over IPv4 TCP, as the C programs' does.
func interopRunGIDs(t *testing.T, vm, bin string, tr Transport, common string, rdmagoServes bool, g gids) {
	t.Helper()
	tool := tr.Tool()
	host := func(args string) *exec.Cmd {
		pre := []string{"host", "env"}
		if g.env != "" {
			pre = append(pre, g.env)
		}
		return exec.Command(vm, append(append(pre, "timeout", vmtest.Timeout,
			bin, tr.String()+"_pingpong", "-d", "rxe_br0", "-g", g.host), strings.Fields(args)...)...)
	}
	guest := func(args string) *exec.Cmd {
		// comm names are cut to 15 characters: ibv_srq_pingpon. stdbuf
		// makes the C program's stdout line-buffered, so that its lines
		// come as printed and survive a kill by timeout.
		return exec.Command(vm, "exec", "1", fmt.Sprintf("pkill -x %s; timeout %s stdbuf -oL %s -d rxe0 -g %s %s", tool[:min(15, len(tool))], vmtest.Timeout, tool, g.guest, args))
	}
	var srv, cli *exec.Cmd
	if rdmagoServes {
		srv, cli = host(common), guest(common+" -e 10.77.0.1")
	} else {
		srv, cli = guest(common), host(common+" -e 10.77.0.11")
	}
	srvOut := vmtest.NewReadyBuffer("  local address:")
	srv.Stdout, srv.Stderr = srvOut, srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	// Both servers print their local address just before they listen;
	// ssh to the emulated guest and its start take seconds.
	var srvErr error
	select {
	case <-srvOut.Ready:
		time.Sleep(time.Second)
	case srvErr = <-exited:
		t.Errorf("the server exited before listening: %v\n%s", srvErr, srvOut)
		return
	case <-time.After(2 * time.Minute):
		srv.Process.Kill()
		t.Errorf("the server did not start listening in 2 minutes: %v\n%s", <-exited, srvOut)
		return
	}
	cliOut, cliErr := cli.CombinedOutput()
	srvErr = <-exited
	srvName, cliName := "rdmago", tool
	if !rdmagoServes {
		srvName, cliName = tool, "rdmago"
	}
	t.Logf("%s %s\n--- server (%s):\n%s--- client (%s):\n%s", tool, common, srvName, srvOut.String(), cliName, cliOut)
	if srvErr != nil || cliErr != nil {
		t.Errorf("server %v, client %v", srvErr, cliErr)
		return
	}
	iters := "1000"
	if f := strings.Fields(common); len(f) > 1 && f[0] == "-n" {
		iters = f[1]
	}
	for _, out := range []string{srvOut.String(), string(cliOut)} {
		if !strings.Contains(out, iters+" iters in ") {
			t.Errorf("no result line")
		}
		if strings.Contains(out, "invalid data") {
			t.Errorf("the C program found invalid data")
		}
	}
}

// TestInteropWithLinuxSoftRoCE runs `rdmago rc_pingpong`, uc_pingpong,
// ud_pingpong and srq_pingpong against rdma-core's ibv_*_pingpong on Linux
// Soft-RoCE in vm1 of the interop harness, in both directions, 1000
// iterations with -c, at sizes 1, 1024, 4096 and 65536 (UD: only up to the
// guest's port MTU of 1024, at its default 1500-byte Ethernet MTU). It runs
// only when RDMAGO_INTEROP_VM names the harness's vm script and `vm up 1`
// has been run; otherwise it says so and skips.
func TestInteropWithLinuxSoftRoCE(t *testing.T) {
	vm := vmtest.VM(t, "Linux Soft-RoCE")
	bin := vmtest.BuildRdmago(t)
	for _, tr := range []Transport{RC, UC, UD, SRQ} {
		sizes := []int{1, 1024, 4096, 65536}
		if tr == UD {
			sizes = []int{1, 1024}
		}
		for _, size := range sizes {
			for _, rdmagoServes := range []bool{true, false} {
				dir := "ibv client to rdmago server"
				if !rdmagoServes {
					dir = "rdmago client to ibv server"
				}
				t.Run(fmt.Sprintf("%s size %d %s", tr, size, dir), func(t *testing.T) {
					interopRun(t, vm, bin, tr, fmt.Sprintf("-n 1000 -s %d -c", size), rdmagoServes)
				})
			}
		}
	}
}

// TestInteropIPv6WithLinuxSoftRoCE runs the four ping-pongs against
// rdma-core's in vm1 over IPv6, in both directions, with data checked: over
// the link-local GIDs (index 0 on both sides, where rdma-core's tools
// start) and over the global ones (fd77::1 and fd77::11). Linux sends
// RoCEv2 over IPv6 with UDP checksum 0, which an ordinary socket drops.
func TestInteropIPv6WithLinuxSoftRoCE(t *testing.T) {
	vm := vmtest.VM(t, "Linux Soft-RoCE")
	bin := vmtest.BuildRdmago(t)
	for _, g := range []gids{gidsLinkLocal, gidsGlobal6} {
		for _, tr := range []Transport{RC, UC, UD, SRQ} {
			size := 4096
			if tr == UD {
				size = 1024
			}
			for _, rdmagoServes := range []bool{true, false} {
				dir := "ibv client to rdmago server"
				if !rdmagoServes {
					dir = "rdmago client to ibv server"
				}
				t.Run(fmt.Sprintf("%s %s %s", g.name, tr, dir), func(t *testing.T) {
					interopRunGIDs(t, vm, bin, tr, fmt.Sprintf("-n 200 -s %d -c", size), rdmagoServes, g)
				})
			}
		}
	}
}

// TestInteropRCWithLoss runs rc_pingpong in both directions while the
// guest drops 1% of the packets it sends (netem on its eth0), so that
// rdmago's retransmission and duplicate detection meet Linux's. The 64 KiB
// messages are 64 packets each: a loss among them leaves packets after
// the gap, which rdmago's responder holds and acknowledges with the
// missing one, ahead of Linux's requester's resends; -c checks every
// byte.
func TestInteropRCWithLoss(t *testing.T) {
	vm := vmtest.VM(t, "Linux Soft-RoCE")
	bin := vmtest.BuildRdmago(t)
	vmtest.GuestNetem(t, vm, "loss 1%")
	for _, common := range []string{"-n 1000 -s 4096 -c", "-n 300 -s 65536 -c"} {
		for _, rdmagoServes := range []bool{true, false} {
			interopRun(t, vm, bin, RC, common, rdmagoServes)
		}
	}
}
