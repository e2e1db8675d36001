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
		{"ud has no -m", []string{"ud_pingpong", "-m", "1024"}, 2, "invalid option -- 'm'"},
		{"uc has no -q", []string{"uc_pingpong", "-q", "4"}, 2, "invalid option -- 'q'"},
		{"rc has no -q", []string{"rc_pingpong", "-q", "4"}, 2, "invalid option -- 'q'"},
		{"srq has no -o (on-demand paging)", []string{"srq_pingpong", "-o"}, 2, "invalid option -- 'o'"},
		{"srq -q 0", []string{"srq_pingpong", "-q", "0"}, 2, `-q "0": want a number from 1 to 255`},
		{"srq -q 256", []string{"srq_pingpong", "--num-qp", "256", "-r", "1000"}, 2, `--num-qp "256": want a number from 1 to 255`},
		{"srq more QPs than receives", []string{"srq_pingpong", "-q", "32", "-r", "16"}, 2, "rx_depth 16 is too small for 32 QPs"},
		{"srq default 16 QPs need -r 16", []string{"srq_pingpong", "-r", "15"}, 2, "rx_depth 15 is too small for 16 QPs"},
		{"uc bad MTU", []string{"uc_pingpong", "-m", "1000"}, 2, `-m "1000": must be 256, 512, 1024, 2048 or 4096`},
		{"srq bad MTU", []string{"srq_pingpong", "--mtu=8192"}, 2, `--mtu "8192": want a number from 256 to 4096`},
		{"ud size 0", []string{"ud_pingpong", "-s", "0"}, 2, `rdmago ud_pingpong: -s "0": want a number from 1 to 1073741824`},
		{"uc size not a number", []string{"uc_pingpong", "-s", "big"}, 2, `-s "big": want a number`},
		{"ud bad port", []string{"ud_pingpong", "-p", "70000"}, 2, `-p "70000": want a number from 0 to 65535`},
		{"ud ib port 0", []string{"ud_pingpong", "-i", "0"}, 2, `-i "0": want a number from 1 to 255`},
		{"srq no iterations", []string{"srq_pingpong", "-n", "0"}, 2, `-n "0": want a number from 1`},
		{"uc SL 16", []string{"uc_pingpong", "-l", "16"}, 2, `-l "16": want a number from 0 to 15`},
		{"ud GID index -2", []string{"ud_pingpong", "-g", "-2"}, 2, `-g "-2": want a number from 0 to 255`},
		{"unknown long option", []string{"rc_pingpong", "--bogus"}, 2, "unrecognized option '--bogus'"},
		{"missing argument", []string{"rc_pingpong", "-s"}, 2, "option requires an argument -- 's'"},
		{"ud two hosts", []string{"ud_pingpong", "host1", "host2"}, 2, `one server host at most, got ["host1" "host2"]`},
		{"ud -h", []string{"ud_pingpong", "-h"}, 0, ""},
		{"srq -h", []string{"srq_pingpong", "-h"}, 0, ""},
		{"uc --help", []string{"uc_pingpong", "--help"}, 0, ""},
		{"ud unknown device", []string{"ud_pingpong", "-d", "nosuchdev"}, 1, "rdmago ud_pingpong: IB device nosuchdev not found"},
		{"rc client to port 0", []string{"rc_pingpong", "-p", "0", "127.0.0.1"}, 2, "rdmago rc_pingpong: -p 0: the client needs the port the server listens on"},
		{"rc size 2^31", []string{"rc_pingpong", "-s", "2147483648"}, 2, `-s "2147483648": want a number from 1 to 1073741824`},
		{"srq size 2^63", []string{"srq_pingpong", "-s", "9223372036854775808"}, 2, `-s "9223372036854775808": want a number`},
		{"uc negative iterations", []string{"uc_pingpong", "-n", "-1"}, 2, `-n "-1": want a number from 1`},
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

func TestPingpongHelpListsTheCOptions(t *testing.T) {
	code, out, _ := runCmd("srq_pingpong", "--help")
	for _, want := range []string{"options (those of ibv_srq_pingpong)", "-q, --num-qp=NUM", "(default 16)", "-g, --gid-idx=IDX"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d; help lacks %q:\n%s", code, want, out)
		}
	}
}

// Without -g on a RoCE port the tools take the device's IPv4 GID and say
// so, where the C programs fail.
func TestPingpongPicksAGIDWhenNoneIsGiven(t *testing.T) {
	useLoopbackDevice(t)
	port := freeTCPPort(t)
	var wg sync.WaitGroup
	var scode int
	var serr string
	wg.Add(1)
	go func() {
		defer wg.Done()
		scode, _, serr = runCmd("rc_pingpong", "-n", "10", "-p", port)
	}()
	time.Sleep(200 * time.Millisecond)
	ccode, _, cerr := runCmd("rc_pingpong", "-n", "10", "-p", port, "127.0.0.1")
	wg.Wait()
	if scode != 0 || ccode != 0 {
		t.Fatalf("server %d %s; client %d %s", scode, serr, ccode, cerr)
	}
	for _, e := range []string{serr, cerr} {
		if !strings.Contains(e, "no -g given: using GID index 0 (::ffff:127.0.0.1)") {
			t.Errorf("stderr %q", e)
		}
	}
}

// --stats prints the device's counters at exit, one "name value" line
// each, as `rdma statistic` names them.
func TestStatsFlagPrintsTheCounters(t *testing.T) {
	useLoopbackDevice(t)
	port := freeTCPPort(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runCmd("rc_pingpong", "-g0", "-n", "10", "-p", port)
	}()
	time.Sleep(200 * time.Millisecond)
	code, _, errs := runCmd("rc_pingpong", "--stats", "-g0", "-n", "10", "-p", port, "127.0.0.1")
	wg.Wait()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"# rxe_lo\n", "\nsent_pkts ", "\nrcvd_pkts ", "\nretry_exceeded_err 0\n", "\nrdma_recvs "} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
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
			port := freeTCPPort(t)
			// getopt's forms: an attached argument, a long option with
			// "=", grouped flags on the server.
			common := []string{tc.cmd, "-g0", "-n", "100", "--size=" + tc.size, "-p", port}
			var wg sync.WaitGroup
			var scode int
			var sout, serr string
			wg.Add(1)
			go func() {
				defer wg.Done()
				scode, sout, serr = runCmd(append(common, "-ec")...)
			}()
			time.Sleep(200 * time.Millisecond) // let the server listen
			ccode, cout, cerr := runCmd(append(common, "-c", "127.0.0.1")...)
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

// freeTCPPort returns a TCP port on 127.0.0.1 that nothing listens on
// now, for a ping-pong's out-of-band exchange.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
