package udaddy

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/memnet"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/rdmacm"
)

// memDevices makes a server and a client device on an in-memory network.
func memDevices(t *testing.T, v6 bool) (srv, cli netip.Addr) {
	srv, cli, _ = memnet.Pair(t, 75, v6)
	return srv, cli
}

type syncBuffer = memnet.Buffer

func parse(t *testing.T, args string) Options {
	t.Helper()
	var out, errs bytes.Buffer
	o, err := ParseArgs(strings.Fields(args), &out, &errs)
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v\n%s%s", args, err, out.String(), errs.String())
	}
	o.Idle = 5 * time.Second
	return o
}

func TestUdaddyServerAndClientExchangeDatagrams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v6    bool
		extra string
	}{
		{"IPv4", false, ""},
		{"IPv6", true, ""},
		{"IPv6 three connections", true, "-c 3 -C 20 -S 1000"},
		{"no messages", false, "-C 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvAddr, cliAddr := memDevices(t, tc.v6)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var srvOut, srvErr syncBuffer
			srvDone := make(chan error, 1)
			listening := make(chan struct{})
			so := parse(t, "-b "+srvAddr.String()+" "+tc.extra)
			so.listening = func() { close(listening) }
			go func() { srvDone <- Run(ctx, so, &srvOut, &srvErr) }()
			select {
			case <-listening:
			case err := <-srvDone:
				t.Fatalf("server: %v\n%s%s", err, srvOut.String(), srvErr.String())
			}
			var cliOut, cliErr syncBuffer
			err := Run(ctx, parse(t, "-s "+srvAddr.String()+" -b "+cliAddr.String()+" "+tc.extra), &cliOut, &cliErr)
			if err != nil {
				t.Fatalf("client: %v\n%s%s", err, cliOut.String(), cliErr.String())
			}
			if err := <-srvDone; err != nil {
				t.Fatalf("server: %v\n%s%s", err, srvOut.String(), srvErr.String())
			}
			wantCli := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
			wantSrv := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
			if strings.Contains(tc.extra, "-C 0") {
				wantCli = "udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status 0\n"
				wantSrv = "udaddy: starting server\ntest complete\nreturn status 0\n"
			}
			if got := cliOut.String(); got != wantCli {
				t.Errorf("client printed\n%s\nwant\n%s", got, wantCli)
			}
			if got := srvOut.String(); got != wantSrv {
				t.Errorf("server printed\n%s\nwant\n%s", got, wantSrv)
			}
		})
	}
}

// A client whose server's connection manager runs but has no listener on
// the port gets a SIDR_REP "unsupported" (status 1) and reports
// UNREACHABLE, as udaddy does against Linux.
func TestUdaddyClientWithoutServerFailsClearly(t *testing.T) {
	srvAddr, cliAddr := memDevices(t, true)
	other, err := rdmacm.CreateID(nil, nil, rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy()
	if err := other.BindAddr(netip.AddrPortFrom(srvAddr, 9999)); err != nil {
		t.Fatal(err)
	}
	if err := other.Listen(0); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	err = Run(context.Background(), parse(t, "-s "+srvAddr.String()+" -b "+cliAddr.String()), &out, &errs)
	if err == nil || tool.Status(err) == 0 {
		t.Fatalf("Run succeeded with no server:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\n") || !strings.Contains(out.String(), "return status 1") {
		t.Errorf("stdout %q stderr %q", out.String(), errs.String())
	}
}

func TestUdaddyFlags(t *testing.T) {
	for _, tc := range []struct {
		args   string
		status int
		stderr string
	}{
		{"-C x", 1, `-C "x": want a number`},
		{"-S -5", 1, `-S "-5": want a number`},
		{"-c 0", 1, `-c "0"`},
		{"-x", 1, "invalid option -- 'x'"},
		{"-s", 1, "option requires an argument -- 's'"},
		{"-f gid", 1, "InfiniBand"},
		{"-p 0x106", 1, "datagram port space"},
		{"stray", 1, "no operands"},
		{"-h", 0, ""},
	} {
		var out, errs bytes.Buffer
		_, err := ParseArgs(strings.Fields(tc.args), &out, &errs)
		if got := tool.Status(err); got != tc.status || err == nil {
			t.Errorf("%q: status %d (%v), want %d", tc.args, got, err, tc.status)
		}
		if !strings.Contains(errs.String(), tc.stderr) {
			t.Errorf("%q: stderr %q, want %q", tc.args, errs.String(), tc.stderr)
		}
	}
	o, err := ParseArgs([]string{"-C5", "-S", "64", "-t0x20", "-s", "fd77::1"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || o.Count != 5 || o.Size != 64 || o.TOS != 0x20 || o.Server != "fd77::1" {
		t.Errorf("getopt forms: %+v, %v", o, err)
	}
}
