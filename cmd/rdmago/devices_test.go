package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The tests below open the real software device on loopback.

// testPort is the UDP port the loopback tests serve rxe_lo on, chosen
// once per test binary by useLoopbackDevice.
var testPort struct {
	once sync.Once
	port int
	err  error
}

// useLoopbackDevice makes the rxe provider list rxe_lo serving 127.0.0.1 on
// a free high UDP port, and returns the port. The port is chosen once per
// test binary: the rxe provider keeps the device it first made for an
// interface, with the port it had then.
func useLoopbackDevice(t *testing.T) int {
	t.Helper()
	testPort.once.Do(func() {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			testPort.err = err
			return
		}
		testPort.port = c.LocalAddr().(*net.UDPAddr).Port
		testPort.err = c.Close()
	})
	if testPort.err != nil {
		t.Fatal(testPort.err)
	}
	t.Setenv("RDMAGO_RXE_ADDR", "127.0.0.1")
	t.Setenv("RDMAGO_RXE_PORT", strconv.Itoa(testPort.port))
	return testPort.port
}

func TestDevinfoVerboseOnLoopback(t *testing.T) {
	port := useLoopbackDevice(t)
	code, out, errs := runCmd("devinfo", "-v")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	for _, want := range []string{
		"hca_id:\trxe_lo\n",
		"\ttransport:\t\t\tInfiniBand (0)\n",
		"\tphys_port_cnt:\t\t\t1\n",
		"\t\tport:\t1\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tmax_mtu:\t\t4096 (5)\n",
		// The MTU of lo is 65536; less 80 bytes of headers, capped at 4096.
		"\t\t\tactive_mtu:\t\t4096 (5)\n",
		"\t\t\tlink_layer:\t\tEthernet\n",
		"\t\t\tgid_tbl_len:\t\t1\n",
		// ibv_devinfo prints RoCE v2 GIDs with inet_ntop: this is
		// 0000:0000:0000:0000:0000:ffff:7f00:0001.
		"\t\t\tGID[  0]:\t\t::ffff:127.0.0.1, RoCE v2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "hca_id:"); n != 1 {
		t.Errorf("%d devices printed, want rxe_lo only:\n%s", n, out)
	}
	// devinfo must have closed the device: its UDP port is free again.
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatalf("device left open: %v", err)
	}
	c.Close()
}

func TestDevicesGUIDMatchesDevinfoNodeGUID(t *testing.T) {
	useLoopbackDevice(t)
	code, out, errs := runCmd("devices")
	if code != 0 {
		t.Fatalf("devices: exit %d, stderr %s", code, errs)
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 4 || lines[3] != "" || !strings.HasPrefix(lines[2], "    rxe_lo          \t") {
		t.Fatalf("want the header and one rxe_lo line, got %q", out)
	}
	guid := strings.TrimPrefix(lines[2], "    rxe_lo          \t")
	if len(guid) != 16 {
		t.Fatalf("GUID %q is not 16 hex digits", guid)
	}
	code, out, errs = runCmd("devinfo", "-d", "rxe_lo")
	if code != 0 {
		t.Fatalf("devinfo: exit %d, stderr %s", code, errs)
	}
	want := "\tnode_guid:\t\t\t" + guid[0:4] + ":" + guid[4:8] + ":" + guid[8:12] + ":" + guid[12:16] + "\n"
	if !strings.Contains(out, want) {
		t.Errorf("devinfo lacks %q:\n%s", want, out)
	}
}

// Querying a device never needs its UDP port: devinfo works while another
// program (Linux Soft-RoCE, say) holds it, and what does need it, a QP,
// fails saying who holds it.
func TestDevinfoWorksWhileAnotherProgramHoldsThePort(t *testing.T) {
	port := useLoopbackDevice(t)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	code, out, errs := runCmd("devinfo")
	if code != 0 || !strings.Contains(out, "hca_id:\trxe_lo") {
		t.Errorf("devinfo: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = runCmd("rc_pingpong", "-g", "0", "-n", "1")
	if code == 0 {
		t.Fatal("rc_pingpong succeeded with the port held by another program")
	}
	for _, want := range []string{fmt.Sprintf("127.0.0.1:%d", port), "already in use by a program that is not rdmago"} {
		if !strings.Contains(errs, want) {
			t.Errorf("rc_pingpong's stderr %q lacks %q", errs, want)
		}
	}
}

func TestDevinfoArguments(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // the whole of stdout, if not "*"
		stderr string // a part of stderr
	}{
		{"list prints names only", []string{"devinfo", "-l"}, 0, "1 HCA found:\n\trxe_lo\n\n", ""},
		{"long list flag", []string{"devinfo", "--list"}, 0, "1 HCA found:\n\trxe_lo\n\n", ""},
		{"unknown device names the devices there are", []string{"devinfo", "-d", "mlx5_0"}, 1, "",
			"IB device 'mlx5_0' wasn't found (devices: rxe_lo)"},
		{"port beyond the device's ports", []string{"devinfo", "-d", "rxe_lo", "-i", "2"}, 1, "",
			"invalid port requested for device rxe_lo"},
		{"port zero is a usage error", []string{"devinfo", "-i", "0"}, 2, "", `-i "0": want a number from 1 to 255`},
		{"port above 255 is a usage error", []string{"devinfo", "-i256"}, 2, "", `-i "256": want a number from 1 to 255`},
		{"unknown flag", []string{"devinfo", "-x"}, 2, "", "invalid option -- 'x'"},
		{"grouped flags", []string{"devinfo", "-vd", "rxe_lo"}, 0, "*", ""},
		{"stray argument", []string{"devinfo", "rxe_lo"}, 2, "", `unexpected argument "rxe_lo"`},
		{"help", []string{"devinfo", "-h"}, 0, "*", ""},
		{"one port by long flags", []string{"devinfo", "--ib-dev=rxe_lo", "--ib-port", "1"}, 0, "*", ""},
		{"devices takes no arguments", []string{"devices", "x"}, 2, "", `unexpected argument "x"`},
		{"devices help", []string{"devices", "--help"}, 0, "usage: rdmago devices\n\nLists the RDMA devices and their node GUIDs, as ibv_devices does.\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			useLoopbackDevice(t)
			code, out, errs := runCmd(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if tt.stdout != "*" && out != tt.stdout {
				t.Errorf("stdout %q, want %q", out, tt.stdout)
			}
			if !strings.Contains(errs, tt.stderr) {
				t.Errorf("stderr %q lacks %q", errs, tt.stderr)
			}
		})
	}
}
