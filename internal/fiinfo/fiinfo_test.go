package fiinfo

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	_ "github.com/rdmago/rdmago/fabric/tcp"
)

func run(args ...string) (string, string, int) {
	var out, errw bytes.Buffer
	rc := Main(context.Background(), args, &out, &errw)
	return out.String(), errw.String(), rc
}

func TestNoMatchExitsWith61(t *testing.T) {
	for _, args := range [][]string{{"-p", "nosuch"}, {"-t", "FI_EP_DGRAM", "-p", "tcp"}, {"-l", "-p", "nosuch"}} {
		_, errw, rc := run(args...)
		if rc != 61 || errw != "fi_getinfo: -61\n" {
			t.Errorf("%v: exit %d, stderr %q", args, rc, errw)
		}
	}
}

func TestBadOptionsAreRefused(t *testing.T) {
	for _, args := range [][]string{{"-t", "FI_EP_NONE"}, {"-c", "FI_NOPE"}, {"-a", "FI_NOPE"}, {"-Z"}, {"stray"}} {
		if _, _, rc := run(args...); rc != 1 {
			t.Errorf("%v: exit %d, want 1", args, rc)
		}
	}
}

func TestListingShowsTheTCPProvider(t *testing.T) {
	out, _, rc := run("-p", "tcp", "-t", "FI_EP_MSG", "-s", "127.0.0.1")
	want := "provider: tcp\n    fabric: 127.0.0.1/32\n    domain: lo\n    version: 117.0\n    type: FI_EP_MSG\n    protocol: FI_PROTO_SOCK_TCP\n"
	if rc != 0 || out != want {
		t.Fatalf("exit %d, output\n%s\nwant\n%s", rc, out, want)
	}
	out, _, _ = run("-l")
	if !strings.Contains(out, "tcp:\n    version: 117.0\n") {
		t.Fatalf("-l: %q", out)
	}
	out, _, _ = run("-p", "tcp", "-t", "FI_EP_MSG", "-s", "127.0.0.1", "-v")
	for _, line := range []string{"---\nfi_info:\n", "    src_addr: fi_sockaddr_in://127.0.0.1:0\n", "        inject_size: 128\n", "        comp_order: [ FI_ORDER_STRICT ]\n", "    nic: (nil)\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("-v lacks %q", line)
		}
	}
}

// TestOutputMatchesCFiInfo compares with libfabric's fi_info, where it is
// installed, for the tcp provider's MSG endpoints.
func TestOutputMatchesCFiInfo(t *testing.T) {
	if _, err := exec.LookPath("fi_info"); err != nil {
		t.Skip("libfabric's fi_info is not installed (apt-get install libfabric-bin)")
	}
	for _, args := range []string{
		"-p tcp -t FI_EP_MSG",
		"-p tcp -t FI_EP_MSG -v",
		"-p tcp -t FI_EP_MSG -c FI_MSG -v",
		"-p tcp -t FI_EP_MSG -c FI_MSG|FI_RMA -v",
		"-p tcp -t FI_EP_MSG -s 127.0.0.1 -v",
		"-p tcp -t FI_EP_MSG -s 127.0.0.1 -P 5555 -v",
		"-p tcp -t FI_EP_MSG -n 127.0.0.1 -P 4000 -v",
	} {
		want, err := exec.Command("fi_info", strings.Fields(args)...).Output()
		if err != nil {
			t.Fatalf("fi_info %s: %v", args, err)
		}
		got, _, rc := run(strings.Fields(args)...)
		if rc != 0 || got != string(want) {
			t.Errorf("fi_info %s differs:\n--- C\n%s\n--- rdmago\n%s", args, want, got)
		}
	}
}

// TestSocketsAndUDPMatchCFiInfoButForCaps compares the sockets and udp
// providers' entries with C's, line by line: the same but for the caps
// lines, where each lists a subset of C's (what the provider offers:
// see the packages' documentation for what it leaves out).
func TestSocketsAndUDPMatchCFiInfoButForCaps(t *testing.T) {
	if _, err := exec.LookPath("fi_info"); err != nil {
		t.Skip("libfabric's fi_info is not installed (apt-get install libfabric-bin)")
	}
	for _, args := range []string{
		"-p sockets",
		"-p sockets -v",
		"-p sockets -t FI_EP_RDM -s 127.0.0.1 -P 5555 -v",
		"-p sockets -t FI_EP_MSG -n 127.0.0.1 -P 4000 -v",
		"-p udp -t FI_EP_DGRAM -v",
		"-p udp -t FI_EP_DGRAM -s 127.0.0.1 -v",
	} {
		want, err := exec.Command("fi_info", strings.Fields(args)...).Output()
		if err != nil {
			t.Fatalf("fi_info %s: %v", args, err)
		}
		got, _, rc := run(strings.Fields(args)...)
		cl, gl := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		if rc != 0 || len(cl) != len(gl) {
			t.Errorf("fi_info %s: exit %d, %d lines, want %d:\n--- C\n%s\n--- rdmago\n%s", args, rc, len(gl), len(cl), want, got)
			continue
		}
		for i := range cl {
			c, g := cl[i], gl[i]
			cp, cflags, ccut := strings.Cut(c, "caps: [")
			gp, gflags, gcut := strings.Cut(g, "caps: [")
			if !ccut || !gcut || cp != gp {
				if c != g {
					t.Errorf("fi_info %s, line %d: %q, C's %q", args, i+1, g, c)
				}
				continue
			}
			have := strings.Fields(strings.NewReplacer(",", " ", "]", " ").Replace(cflags))
			for _, f := range strings.Fields(strings.NewReplacer(",", " ", "]", " ").Replace(gflags)) {
				if !slices.Contains(have, f) {
					t.Errorf("fi_info %s, line %d: %s, which C does not list: %q", args, i+1, f, c)
				}
			}
		}
	}
}
