package main

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPingpongCommandsRejectBadFlags(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"ud has no -m", []string{"ud_pingpong", "-m", "1024"}, 2, "flag provided but not defined: -m"},
		{"uc has no -q", []string{"uc_pingpong", "-q", "4"}, 2, "flag provided but not defined: -q"},
		{"rc has no -q", []string{"rc_pingpong", "-q", "4"}, 2, "flag provided but not defined: -q"},
		{"srq has no -o (on-demand paging)", []string{"srq_pingpong", "-o"}, 2, "flag provided but not defined: -o"},
		{"srq -q 0", []string{"srq_pingpong", "-q", "0"}, 2, "-q must be 1-255"},
		{"srq -q 256", []string{"srq_pingpong", "--num-qp", "256", "-r", "1000"}, 2, "-q must be 1-255"},
		{"srq more QPs than receives", []string{"srq_pingpong", "-q", "32", "-r", "16"}, 2, "rx_depth 16 is too small for 32 QPs"},
		{"srq default 16 QPs need -r 16", []string{"srq_pingpong", "-r", "15"}, 2, "rx_depth 15 is too small for 16 QPs"},
		{"uc bad MTU", []string{"uc_pingpong", "-m", "1000"}, 2, "-m must be 256, 512, 1024, 2048 or 4096"},
		{"srq bad MTU", []string{"srq_pingpong", "--mtu", "8192"}, 2, "-m must be"},
		{"ud size 0", []string{"ud_pingpong", "-s", "0"}, 2, "rdmago ud_pingpong: -s must be 1 to 2^30"},
		{"uc size not a number", []string{"uc_pingpong", "-s", "big"}, 2, `invalid value "big" for flag -s`},
		{"ud bad port", []string{"ud_pingpong", "-p", "70000"}, 2, "-p must be a TCP port"},
		{"ud ib port 0", []string{"ud_pingpong", "-i", "0"}, 2, "-i must be 1-255"},
		{"srq no iterations", []string{"srq_pingpong", "-n", "0"}, 2, "-n must be positive"},
		{"uc SL 16", []string{"uc_pingpong", "-l", "16"}, 2, "-l must be 0-15"},
		{"ud GID index -2", []string{"ud_pingpong", "-g", "-2"}, 2, "-g must be a GID index"},
		{"ud two hosts", []string{"ud_pingpong", "host1", "host2"}, 2, "usage:\n  rdmago ud_pingpong [flags]"},
		{"ud -h", []string{"ud_pingpong", "-h"}, 0, "flags (those of ibv_ud_pingpong)"},
		{"srq -h lists -q", []string{"srq_pingpong", "-h"}, 0, "number of QPs to use (default 16)"},
		{"uc -h", []string{"uc_pingpong", "--help"}, 0, "over a UC QP"},
		{"ud unknown device", []string{"ud_pingpong", "-d", "nosuchdev"}, 1, "rdmago ud_pingpong: IB device nosuchdev not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runCmd(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if !strings.Contains(errs, tt.stderr) {
				t.Errorf("stderr %q lacks %q", errs, tt.stderr)
			}
		})
	}
}

func TestUDPingpongSizeAboveTheMTUFails(t *testing.T) {
	useLoopbackDevice(t) // rxe_lo: active MTU 4096
	code, _, errs := runCmd("ud_pingpong", "-g", "0", "-s", "4097")
	if code != 1 || !strings.Contains(errs, "rdmago ud_pingpong: requested size 4097 larger than port MTU (4096)") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// TestPingpongCommandsOverLoopback runs each command's server and client
// in this process, both on the loopback device.
func TestPingpongCommandsOverLoopback(t *testing.T) {
	useLoopbackDevice(t)
	for _, tc := range []struct{ cmd, size string }{
		{"rc_pingpong", "4096"}, {"uc_pingpong", "4096"}, {"ud_pingpong", "4096"}, {"srq_pingpong", "1024"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
			l.Close()
			common := []string{tc.cmd, "-g", "0", "-n", "100", "-s", tc.size, "-c", "-p", port}
			var wg sync.WaitGroup
			var scode int
			var sout, serr string
			wg.Add(1)
			go func() {
				defer wg.Done()
				scode, sout, serr = runCmd(append(common, "-e")...)
			}()
			time.Sleep(200 * time.Millisecond) // let the server listen
			ccode, cout, cerr := runCmd(append(common, "127.0.0.1")...)
			wg.Wait()
			if scode != 0 || ccode != 0 {
				t.Fatalf("server exit %d %s\n%s\nclient exit %d %s\n%s", scode, serr, sout, ccode, cerr, cout)
			}
			for _, out := range []string{sout, cout} {
				if !strings.Contains(out, "100 iters in ") {
					t.Errorf("output:\n%s", out)
				}
			}
		})
	}
}
