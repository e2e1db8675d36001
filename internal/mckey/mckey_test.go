package mckey

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/memnet"
	"github.com/rdmago/rdmago/internal/tool"
)

func parse(t *testing.T, args string) Options {
	t.Helper()
	var out, errs bytes.Buffer
	o, err := ParseArgs(strings.Fields(args), &out, &errs)
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v\n%s%s", args, err, out.String(), errs.String())
	}
	o.Pause = 50 * time.Millisecond
	o.Idle = 5 * time.Second
	return o
}

// TestMckeySenderReachesEveryReceiver: two receivers on one device and
// one on another join the group; a sender on the first device sends to
// it, and each receiver gets every datagram of each of its IDs.
func TestMckeySenderReachesEveryReceiver(t *testing.T) {
	for _, tc := range []struct {
		name, group, extra, sender string
		v6                         bool
	}{
		{name: "IPv4", group: "239.9.9.9"},
		{name: "IPv6", group: "ff0e::9:9", v6: true},
		{name: "two IDs each, 1000-byte datagrams", group: "239.9.9.10", extra: "-c 2 -C 30 -S 1000"},
		{name: "send-only sender", group: "239.9.9.11", sender: "-o"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			memnet.NoLeaks(t)
			srv, cli, _ := memnet.Pair(t, 76, tc.v6)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			type result struct {
				err error
				out *memnet.Buffer
			}
			var receivers []chan result
			for _, bind := range []string{srv.String(), srv.String(), cli.String()} {
				o := parse(t, fmt.Sprintf("-m %s -b %s %s", tc.group, bind, tc.extra))
				joined := make(chan struct{})
				o.joined = func() { close(joined) }
				o.Pause = 0
				done := make(chan result, 1)
				out := &memnet.Buffer{}
				go func() { done <- result{Run(ctx, o, out, out), out} }()
				select {
				case <-joined:
				case r := <-done:
					t.Fatalf("a receiver ended before joining: %v\n%s", r.err, r.out)
				}
				receivers = append(receivers, done)
			}
			var out bytes.Buffer
			if err := Run(ctx, parse(t, fmt.Sprintf("-s -m %s -b %s %s %s", tc.group, cli, tc.extra, tc.sender)), &out, &out); err != nil {
				t.Fatalf("sender: %v\n%s", err, out.String())
			}
			for _, want := range []string{"mckey: starting client\nmckey: joining\nmckey: joined dgid: ", "initiating data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("sender printed\n%s\nwant %q", out.String(), want)
				}
			}
			for i, done := range receivers {
				r := <-done
				if r.err != nil || !strings.Contains(r.out.String(), "receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n") {
					t.Errorf("receiver %d: %v\n%s", i, r.err, r.out)
				}
			}
		})
	}
}

// TestMckeyReceiverWithoutSenderGivesUp: mckey.c would wait for ever; this
// one says how many datagrams came and fails.
func TestMckeyReceiverWithoutSenderGivesUp(t *testing.T) {
	srv, _, _ := memnet.Pair(t, 76, false)
	o := parse(t, "-m 239.9.9.12 -C 3 -b "+srv.String())
	o.Idle = 200 * time.Millisecond
	var out, errs memnet.Buffer
	err := Run(context.Background(), o, &out, &errs)
	if tool.Status(err) != 1 || !strings.Contains(errs.String(), "0 of 3 datagrams received") || !strings.HasSuffix(out.String(), "return status 1\n") {
		t.Fatalf("%v\nstdout %q\nstderr %q", err, out.String(), errs.String())
	}
}

// TestMckeyFailuresAreReported: what fails after the flags parsed ends the
// run with status 1 and a message, as mckey's do.
func TestMckeyFailuresAreReported(t *testing.T) {
	for _, tc := range []struct{ args, msg string }{
		{"-m 10.1.2.3", "not a multicast address"},
		{"-m 239.1.1.1 -l", "unable to create QP"},
		{"-m 239.1.1.1 -S 5000", "message_size 5000 is larger than active mtu"},
		{"-m ff0e::1", "RDMA_CM_EVENT_ADDR_ERROR"},
	} {
		srv, _, _ := memnet.Pair(t, 76, false) // a software device closes with its last context
		var out, errs memnet.Buffer
		err := Run(context.Background(), parse(t, tc.args+" -b "+srv.String()), &out, &errs)
		if tool.Status(err) != 1 || !strings.Contains(errs.String(), tc.msg) || !strings.HasSuffix(out.String(), "return status 1\n") {
			t.Errorf("%s: %v\nstdout %q\nstderr %q", tc.args, err, out.String(), errs.String())
		}
	}
}

func TestMckeyFlags(t *testing.T) {
	for _, tc := range []struct {
		args   string
		status int
		stderr string
	}{
		{"", 1, "-m multicast_address is required"},
		{"-m 239.1.1.1 -C x", 1, `-C "x": want a number`},
		{"-m 239.1.1.1 -c 0", 1, `-c "0"`},
		{"-M ff12::1 -b ::1", 1, "InfiniBand"},
		{"-m 239.1.1.1 -p 0x106", 1, "datagram port space"},
		{"-m 239.1.1.1 -x", 1, "invalid option -- 'x'"},
		{"-m", 1, "option requires an argument -- 'm'"},
		{"-m 239.1.1.1 stray", 1, "no operands"},
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
	o, err := ParseArgs([]string{"-sm239.1.1.1", "-C5", "-S", "64", "-o", "-p0x111"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || !o.Sender || o.Group != "239.1.1.1" || o.Count != 5 || o.Size != 64 || !o.SendOnly {
		t.Errorf("getopt forms: %+v, %v", o, err)
	}
}
