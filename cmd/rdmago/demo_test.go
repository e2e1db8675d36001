package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
)

// demo refuses arguments it does not take, shows the failing side's own
// error first rather than the other side's EOF, and --stats prints the
// counters of the devices it made.
func TestDemoCommandLine(t *testing.T) {
	port := strconv.Itoa(int(freeUDPPort(t)))
	for _, c := range []struct {
		name   string
		args   []string
		status int
		want   []string // in stderr
		notAt0 string   // not at the start of the error line
	}{
		{"extra argument", []string{"demo", "extra"}, 2, []string{`unexpected argument "extra"`}, ""},
		{"client address not of this host", []string{"demo", "-port", port, "-client", "192.0.2.1", "-time", "10ms"}, 1,
			[]string{"rdmago demo: client: ", "192.0.2.1", "not an address of this host"}, "rdmago demo: server"},
		{"stats", []string{"demo", "--stats", "-port", port, "-time", "10ms", "-size", "4096"}, 0,
			[]string{"# rxe_server", "# rxe_client", "sent_pkts "}, ""},
	} {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != c.status {
			t.Errorf("%s: status %d, want %d\n%s", c.name, got, c.status, stderr.String())
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.name, w, stderr.String())
			}
		}
		if c.notAt0 != "" && strings.HasPrefix(stderr.String(), c.notAt0) {
			t.Errorf("%s: the error starts with the side that only saw the other go:\n%s", c.name, stderr.String())
		}
	}
}

// freeUDPPort returns a UDP port free on 127.0.0.1 at the moment.
func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}
