package main

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
)

func TestRpingRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"no side", []string{"rping"}, 22, "rdmago rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n", ""},
		{"unknown flag", []string{"rping", "-s", "-z"}, 22, "\t-P\t\tpersistent server mode allowing multiple connections\n", "rdmago rping: invalid option -- 'z'\n"},
		{"size too small", []string{"rping", "-c", "-a", "10.0.0.1", "-S", "8"}, 22, "", "Invalid size 8 (valid range is 23 to 65536)\n"},
		{"size too large", []string{"rping", "-s", "-S", "70000"}, 22, "", "Invalid size 70000 (valid range is 23 to 65536)\n"},
		{"negative count", []string{"rping", "-s", "-C", "-5"}, 22, "", "Invalid count -5\n"},
		{"bad address", []string{"rping", "-c", "-a", "no such host"}, 254, "getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n", ""},
		{"help", []string{"rping", "-h"}, 0, "\t-S size \tping data size\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCmd(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if !strings.Contains(out, tt.stdout) || tt.stdout == "" && out != "" {
				t.Errorf("stdout %q lacks %q", out, tt.stdout)
			}
			if errs != tt.stderr {
				t.Errorf("stderr %q, want %q", errs, tt.stderr)
			}
		})
	}
}

// TestRpingOverMemoryNetwork runs `rdmago rping -s` and `rdmago rping -c`
// in this process, on two software RoCE devices joined by an in-memory
// network and registered with the connection manager.
func TestRpingOverMemoryNetwork(t *testing.T) {
	network := link.NewNetwork(7)
	srv, cli := netip.MustParseAddr("10.76.0.2"), netip.MustParseAddr("10.76.0.1")
	for _, a := range []netip.Addr{srv, cli} {
		l, err := network.Attach(a)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := rxe.NewDevice(rxe.Config{Name: "rping_cmd_" + a.String(), Links: []link.Link{l}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rdmacm.RegisterDevice(dev))
	}
	for _, size := range []int{64, 65535} {
		t.Run(fmt.Sprint("size ", size), func(t *testing.T) {
			common := []string{"rping", "-C", "10", "-S", fmt.Sprint(size), "-v", "-V"}
			var wg sync.WaitGroup
			var scode int
			var sout, serr string
			wg.Add(1)
			go func() {
				defer wg.Done()
				scode, sout, serr = runCmd(append(common, "-s", "-a", srv.String())...)
			}()
			time.Sleep(50 * time.Millisecond) // let the server listen
			ccode, cout, cerr := runCmd(append(common, "-c", "-I", cli.String(), "-a", srv.String())...)
			wg.Wait()
			if scode != 0 || ccode != 0 {
				t.Fatalf("server exit %d\n%s%s\nclient exit %d\n%s%s", scode, sout, serr, ccode, cout, cerr)
			}
			if n := strings.Count(cout, "\nping data: rdma-ping-"); n != 9 || !strings.HasPrefix(cout, "ping data: rdma-ping-0: ABCDEFG") ||
				!strings.Contains(cout, "ping data: rdma-ping-9: JKLMN") {
				t.Errorf("client stdout:\n%s", cout)
			}
			if n := strings.Count(sout, "server ping data: rdma-ping-"); n != 10 {
				t.Errorf("server stdout:\n%s", sout)
			}
			if cerr != "client DISCONNECT EVENT...\n" || serr != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" {
				t.Errorf("client stderr %q, server stderr %q", cerr, serr)
			}
		})
	}
}
