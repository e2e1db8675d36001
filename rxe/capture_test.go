package rxe

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/dump"
	"github.com/rdmago/rdmago/verbs"
)

// TestPacketsOnTheWireDecodeWithDumpAndTshark captures what two devices
// send each other on loopback with dumpcap, then checks that rdmago dump
// finds every packet well formed with a good ICRC, and that tshark's
// InfiniBand dissector sees the same number of packets, none malformed.
func TestPacketsOnTheWireDecodeWithDumpAndTshark(t *testing.T) {
	dumpcap, err := exec.LookPath("dumpcap")
	if err != nil {
		t.Skip("dumpcap (Wireshark) not installed: the on-the-wire check needs it")
	}
	if os.Geteuid() != 0 {
		t.Skip("capturing on loopback needs root")
	}
	// On loopback a GSO send stays one datagram, which a capture shows
	// whole; real interfaces cut it into the packets a peer sees.
	t.Setenv("RDMAGO_DISABLE_GSO", "1")
	la, lb := udpLinks(t)
	port := la.Port()
	file := filepath.Join(t.TempDir(), "rxe.pcapng")
	cmd := exec.Command(dumpcap, "-i", "lo", "-f", fmt.Sprintf("udp port %d", port), "-w", file)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Skipf("dumpcap: %v", err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			t.Log("dumpcap: " + sc.Text())
			if !signalled && strings.Contains(sc.Text(), "Capturing on") {
				ready <- true
				signalled = true
			}
		}
		if !signalled {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Skip("dumpcap could not capture on lo")
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Skip("dumpcap did not start")
	}
	// dumpcap says it is capturing a little before its filter is in place.
	time.Sleep(time.Second)
	a, b := newPair(t, la, lb, pairOpts{mtu: verbs.MTU1024})
	exerciseRC(t, a, b)
	// dumpcap hands packets over in blocks, each when full or a second old:
	// give the last one time to go out before stopping it.
	time.Sleep(1500 * time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()

	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := dump.File(&out, bytes.NewReader(data), dump.Options{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	if st.RoCE < 150 || !st.OK() || st.ICRCOK != st.RoCE {
		t.Fatalf("capture: %v\n%s", st, out.String())
	}
	for _, op := range []string{"RC_SEND_FIRST", "RC_SEND_LAST_WITH_IMMEDIATE", "RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_LAST",
		"RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_LAST", "RC_FETCH_ADD",
		"RC_COMPARE_SWAP", "RC_ATOMIC_ACKNOWLEDGE", "RC_ACKNOWLEDGE"} {
		if !strings.Contains(out.String(), " "+op+" ") {
			t.Errorf("no %s in the capture", op)
		}
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: checked with rdmago dump only")
		return
	}
	decode := fmt.Sprintf("udp.port==%d,infiniband", port)
	count := func(filter string) int {
		o, err := exec.Command(tshark, "-r", file, "-d", decode, "-Y", filter).Output()
		if err != nil {
			t.Fatalf("tshark -Y %s: %v", filter, err)
		}
		return strings.Count(string(o), "\n")
	}
	if n := count("infiniband"); n != st.RoCE {
		t.Errorf("tshark decodes %d InfiniBand packets, rdmago dump %d", n, st.RoCE)
	}
	if n := count("_ws.malformed || _ws.expert.severity >= warning"); n != 0 {
		t.Errorf("tshark finds %d malformed or suspicious packets", n)
	}
}
