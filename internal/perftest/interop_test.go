package perftest

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// TestInteropWithPerftest runs each tool on the host side of the VM
// harness (the software device on 10.77.0.1) against perftest's program
// of the same name on the kernel's Soft-RoCE in vm1, both ways; both must
// exit 0 and print a result row of the size and count asked.
func TestInteropWithPerftest(t *testing.T) {
	vm := vmtest.VM(t, "perftest")
	bin := vmtest.BuildRdmago(t)
	type run struct {
		tool  Tool
		extra string
	}
	var runs []run
	for _, tool := range Tools {
		runs = append(runs, run{tool, ""})
	}
	// Several QPs, and UC.
	runs = append(runs, run{Tool{Write, false}, " -q 4"}, run{Tool{Send, false}, " -q 2"}, run{Tool{Send, true}, " -c UC"})
	// Every size, with the handshakes between them; both ways at once.
	runs = append(runs, run{Tool{Send, false}, " -a -n 5"}, run{Tool{Send, true}, " -a -n 5"},
		run{Tool{Write, false}, " -b"}, run{Tool{Read, false}, " -b"}, run{Tool{Write, false}, " -b -a -n 5"},
		run{Tool{Write, false}, " -D 4"})
	// Datagrams (at most the MTU: the VM's is 1024).
	runs = append(runs, run{Tool{Send, false}, " -c UD -s 1024"}, run{Tool{Send, true}, " -c UD -s 1024"})
	// rdma_cm: the exchange over it (-z), and the QPs connected by it (-R).
	runs = append(runs, run{Tool{Write, false}, " -R"}, run{Tool{Send, true}, " -R"}, run{Tool{Read, false}, " -R -q 2"},
		run{Tool{Write, true}, " -R"}, run{Tool{Send, false}, " -z"})
	// Post lists; every latency listed.
	runs = append(runs, run{Tool{Write, false}, " -l 4"}, run{Tool{Send, false}, " -l 5"}, run{Tool{Send, true}, " -U"})
	// ib_send_bw both ways at once.
	runs = append(runs, run{Tool{Send, false}, " -b"}, run{Tool{Send, false}, " -b -a -n 5"}, run{Tool{Send, false}, " -D 4"})
	// (perftest 4.5's own warm-up waits for ever on kernel Soft-RoCE, C
	// against C too: only rdmago's client warms up.)
	runs = append(runs, run{Tool{Read, false}, " --perform_warm_up"})
	// The list, as written.
	runs = append(runs, run{Tool{Write, false}, " -a -n 5"}, run{Tool{Write, false}, " -c UC"}, run{Tool{Read, false}, " -o 4"},
		run{Tool{Atomic, false}, " -A CMP_AND_SWAP"})
	// Latency for a time.
	runs = append(runs, run{Tool{Send, true}, " -D 4"}, run{Tool{Write, true}, " -D 4"}, run{Tool{Read, true}, " -D 4"})
	for _, rn := range runs {
		tool := rn.tool
		for _, goServes := range []bool{true, false} {
			if goServes && strings.Contains(rn.extra, "--perform_warm_up") {
				continue
			}
			t.Run(fmt.Sprintf("%s%s/go-serves=%v", tool.Name(), strings.ReplaceAll(rn.extra, " ", "_"), goServes), func(t *testing.T) {
				flags, size := "-F -n 100 -s 4096"+rn.extra, "4096"
				switch {
				case tool.Verb == Atomic:
					flags, size = "-F -n 100"+rn.extra, "8"
				case strings.Contains(rn.extra, "-s "):
					flags = "-F -n 100" + rn.extra
					size = rn.extra[strings.LastIndex(rn.extra, " ")+1:]
				}
				srv, cli := pairCmds(vm, bin, tool, flags, goServes)
				// (The guest is emulated and slow to start listening.)
				srvOut, cliOut := vmtest.RunPair(t, srv, cli, 3*time.Second)
				for side, out := range map[string]string{"client": cliOut, "server": srvOut} {
					if tool.Lat && (tool.Verb == Read || tool.Verb == Atomic) && side == "server" {
						continue // ib_read_lat's and ib_atomic_lat's servers print no row
					}
					// (perftest counts the iterations of all QPs.)
					iters := " 100 "
					switch rn.extra {
					case " -q 4":
						iters = " 400 "
					case " -q 2", " -R -q 2":
						iters = " 200 "
					case " -a -n 5", " -b -a -n 5":
						iters = " 5 "
					case " -D 4":
						iters = " " // as many as the run made
					}
					size := size
					if rn.extra == " -a -n 5" && tool.Verb == Write && side == "server" {
						size = "8388608" // the server prints the client's last report
					}
					if !strings.Contains(out, "\n "+size+" ") || !strings.Contains(out, iters) {
						t.Errorf("%s printed no row for %s bytes,%siterations:\n%s", side, size, iters, out)
					}
				}
				t.Logf("client:\n%s", cliOut)
			})
		}
	}
}

// TestInteropPerftestUnderLoss runs ib_write_bw and ib_send_bw, 64 KiB
// messages with many in flight, while the guest drops 1% of the packets it
// sends (netem on its eth0), both ways. When the guest's kernel sends, the
// software device's responder holds what comes after each gap and
// acknowledges it with the missing packet, ahead of the kernel
// requester's resends; when it receives, the kernel's ACKs and NAKs are
// lost. Both sides must finish every iteration.
func TestInteropPerftestUnderLoss(t *testing.T) {
	vm := vmtest.VM(t, "perftest")
	bin := vmtest.BuildRdmago(t)
	vmtest.GuestNetem(t, vm, "loss 1%")
	for _, tool := range []Tool{{Write, false}, {Send, false}} {
		for _, goServes := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/go-serves=%v", tool.Name(), goServes), func(t *testing.T) {
				srv, cli := pairCmds(vm, bin, tool, "-F -n 300 -s 65536", goServes)
				srvOut, cliOut := vmtest.RunPair(t, srv, cli, 3*time.Second)
				for side, out := range map[string]string{"client": cliOut, "server": srvOut} {
					if !strings.Contains(out, "\n 65536 ") || !strings.Contains(out, " 300 ") {
						t.Errorf("%s printed no row for 65536 bytes, 300 iterations:\n%s", side, out)
					}
				}
				t.Logf("client:\n%s", cliOut)
			})
		}
	}
}

// pairCmds returns the server and the client of one run of tool with
// flags: rdmago's on the host side (the software device on 10.77.0.1)
// and perftest's in vm1, the server rdmago's if goServes.
func pairCmds(vm, bin string, tool Tool, flags string, goServes bool) (srv, cli *exec.Cmd) {
	host := func(args string) *exec.Cmd { return vmtest.Host(vm, bin, tool.Name(), strings.Fields(args)...) }
	guest := func(args string) *exec.Cmd {
		return vmtest.Guest(vm, tool.Name(), tool.Name()+" -d rxe0 -x 1 "+args)
	}
	if goServes {
		return host(flags), guest(flags + " 10.77.0.1")
	}
	return guest(flags), host(flags + " 10.77.0.11")
}
