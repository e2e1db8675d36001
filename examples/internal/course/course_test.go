package course

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

func TestParseOptionsTakesTheCoursesOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind
		args string
		want Options
	}{
		{"server defaults", PingPong, "server",
			Options{Message: "p server", Role: Server, ServerPort: "7471", Limit: 10, DataSize: 100, Window: 1}},
		{"client with every flag", PingPong, "client -a host -p 9000 -c 5 -s 64 -P 1s -V -v -t",
			Options{Message: "p client", Role: Client, ServerName: "host", ServerPort: "9000", Limit: 5, DataSize: 64, Window: 1,
				Pause: time.Second, Verify: true, Verbose: true, Tracing: true}},
		{"blast defaults", Blast, "server",
			Options{Message: "p server", Role: Server, Kind: Blast, ServerPort: "7471", Limit: 1000, DataSize: 4096, Window: 16}},
		{"blast window", Blast, "client -a h -w 64 -s 1048576",
			Options{Message: "p client", Role: Client, Kind: Blast, ServerName: "h", ServerPort: "7471", Limit: 1000, DataSize: 1 << 20, Window: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseOptions("p", tc.kind, strings.Fields(tc.args), io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			o.p = nil
			if *o != tc.want {
				t.Errorf("got  %+v\nwant %+v", *o, tc.want)
			}
		})
	}
}

func TestParseOptionsRejectsWhatTheProgramsCannotRun(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		args string
		want string
	}{
		{PingPong, "", "say client or server"},
		{PingPong, "listener", "neither client nor server"},
		{PingPong, "client", "needs the server's address"},
		{PingPong, "server -c 0", "-c must be at least 1"},
		{PingPong, "server -s 0", "messages are 1 to"},
		{PingPong, "server -s 1048577", "messages are 1 to"},
		{PingPong, "server -p 70000", "not a port number"},
		{PingPong, "server -P -1s", "-P must not be negative"},
		{PingPong, "server -w 4", "flag provided but not defined: -w"},
		{PingPong, "server stray", `unexpected argument "stray"`},
		{Blast, "server -w 0", "the window is 1 to"},
		{Blast, "server -w 1025", "the window is 1 to"},
		{Blast, "server -w 1024 -s 1048576", "would take more than 64 MiB"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var stderr bytes.Buffer
			_, err := ParseOptions("p", tc.kind, strings.Fields(tc.args), io.Discard, &stderr)
			if err == nil || !strings.Contains(err.Error()+stderr.String(), tc.want) {
				t.Errorf("error %v (stderr %q), want one saying %q", err, stderr.String(), tc.want)
			}
		})
	}
	if _, err := ParseOptions("p", PingPong, []string{"-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestReportsGoToStdoutAndTracesToStderrOnlyWhenTracing(t *testing.T) {
	for _, tracing := range []bool{false, true} {
		var out, errs bytes.Buffer
		o := &Options{Message: "ping-sr-9 client", Tracing: tracing, p: &printer{stdout: &out, stderr: &errs}}
		o.Report("rdma_connect", "connected to", "10.0.0.1:7471")
		o.Trace("ibv_create_cq", "returned cqe", 3)
		o.ReportError("ibv_post_send", errors.New("boom"))
		if got := out.String(); got != "ping-sr-9 client: rdma_connect connected to 10.0.0.1:7471\n" {
			t.Errorf("stdout %q", got)
		}
		wantErr := "ping-sr-9 client: ibv_post_send failed: boom\n"
		if tracing {
			wantErr = "ping-sr-9 client: ibv_create_cq returned cqe 3\n" + wantErr
		}
		if errs.String() != wantErr {
			t.Errorf("tracing %v: stderr %q, want %q", tracing, errs.String(), wantErr)
		}
	}
}

func TestConnectInfoTravelsAsTwoBigEndianUint64s(t *testing.T) {
	ci := ConnectInfo{RemoteLimit: 0x0102030405060708, RemoteDataSize: 4096}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0x10, 0}
	if got := ci.Marshal(); !bytes.Equal(got, want) {
		t.Fatalf("Marshal = % x, want % x", got, want)
	}
	// The CM hands over the request's whole private data area: bytes
	// after the struct are not the agent's business.
	got, err := ParseConnectInfo(append(want, make([]byte, 40)...))
	if err != nil || got != ci {
		t.Errorf("ParseConnectInfo = %+v, %v; want %+v", got, err, ci)
	}
}

func TestParseConnectInfoRejectsWhatAServerMustNotServe(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"none", nil, "0 bytes of private data"},
		{"short", make([]byte, 15), "15 bytes of private data"},
		{"no messages", ConnectInfo{0, 100}.Marshal(), "asks for no messages"},
		{"empty messages", ConnectInfo{1, 0}.Marshal(), "0-byte messages"},
		{"huge messages", ConnectInfo{1, 1 << 40}.Marshal(), "1099511627776-byte messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseConnectInfo(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func FuzzParseConnectInfo(f *testing.F) {
	f.Add(ConnectInfo{RemoteLimit: 10, RemoteDataSize: 100}.Marshal())
	f.Add(append(ConnectInfo{RemoteLimit: 1, RemoteDataSize: MaxDataSize}.Marshal(), make([]byte, 40)...))
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		ci, err := ParseConnectInfo(b)
		if err != nil {
			return
		}
		if ci.RemoteLimit == 0 || ci.RemoteDataSize == 0 || ci.RemoteDataSize > MaxDataSize {
			t.Fatalf("accepted %+v", ci)
		}
		if again := ci.Marshal(); !bytes.Equal(again, b[:ConnectInfoLen]) {
			t.Fatalf("round trip % x, want % x", again, b[:ConnectInfoLen])
		}
	})
}

func TestCheckRecognisesOnlyItsOwnMessage(t *testing.T) {
	for _, size := range []int{1, 7, 8, 100, 4096} {
		b := make([]byte, size)
		Fill(b, 41)
		if !Check(b, 41) {
			t.Fatalf("size %d: message 41 not recognised", size)
		}
		others := []uint64{40, 42}
		if size >= 8 { // every byte of the number is in the message
			others = append(others, 41+1<<32, 41+1<<56)
		}
		for _, other := range others {
			if Check(b, other) {
				t.Errorf("size %d: message 41 taken for %d", size, other)
			}
		}
		b[size-1] ^= 1
		if Check(b, 41) {
			t.Errorf("size %d: a changed byte went unnoticed", size)
		}
	}
}

func TestLatestCMEventErrSaysWhenTheConnectionLeftEstablished(t *testing.T) {
	c := NewControl(&Options{p: &printer{stdout: io.Discard, stderr: io.Discard}})
	for _, step := range []struct {
		ev   rdmacm.EventType
		gone bool
	}{
		{rdmacm.EventAddrResolved, false}, // not connected yet: nothing to report
		{rdmacm.EventRouteResolved, false},
		{rdmacm.EventEstablished, false},
		{rdmacm.EventDisconnected, true},
		{rdmacm.EventTimewaitExit, true},
	} {
		c.RecordCMEvent(step.ev, 0)
		err := c.LatestCMEventErr()
		if (err != nil) != step.gone {
			t.Fatalf("after %s: %v", step.ev, err)
		}
		if err != nil && (!errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), step.ev.String())) {
			t.Errorf("after %s: %v, want ECONNRESET naming the event", step.ev, err)
		}
		if done := c.ConnContext().Err() != nil; done != step.gone {
			t.Errorf("after %s: ConnContext done %v", step.ev, done)
		}
	}
}

func TestAwaitCMEventReturnsAtOnceForAnEventAlreadyRecorded(t *testing.T) {
	c := NewControl(&Options{p: &printer{stdout: io.Discard, stderr: io.Discard}})
	c.RecordCMEvent(rdmacm.EventEstablished, 0)
	c.RecordCMEvent(rdmacm.EventDisconnected, 0) // a wait loop took it
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.AwaitCMEvent(ctx, rdmacm.EventDisconnected, "test"); err != nil {
		t.Fatal(err)
	}
}

func TestTookCountsSendsAndKeepalives(t *testing.T) {
	c := NewControl(&Options{p: &printer{stdout: io.Discard, stderr: io.Discard}})
	c.keepalive = keepalive{on: true, outstanding: true}
	c.sendsInFlight = 2 // a SEND and the keepalive
	if ka, err := c.Took(&verbs.WC{WRID: RecvWRIDBase}); ka || err != nil || c.SendsInFlight() != 2 {
		t.Fatalf("a receive: keepalive %v, %v, %d in flight", ka, err, c.SendsInFlight())
	}
	if ka, err := c.Took(&verbs.WC{WRID: 0, Opcode: verbs.WCSend}); ka || err != nil || c.SendsInFlight() != 1 {
		t.Fatalf("a SEND: keepalive %v, %v, %d in flight", ka, err, c.SendsInFlight())
	}
	if ka, err := c.Took(&verbs.WC{WRID: KeepaliveWRID, Status: verbs.WCRetryExcErr}); !ka || !errors.Is(err, ErrPeerGone) || c.SendsInFlight() != 0 {
		t.Fatalf("a failed keepalive: keepalive %v, %v, %d in flight", ka, err, c.SendsInFlight())
	}
	if _, ok := c.KeepaliveDue(); !ok {
		t.Error("no keepalive due after the last one completed")
	}
	// While the CM says the peer left, a receive will never come, but a
	// SEND in flight still completes.
	gone := verbs.Errorf("test", ErrPeerGone, "left")
	if err := c.PeerGone(gone); err == nil {
		t.Error("PeerGone with nothing in flight = nil")
	}
	c.sendsInFlight = 1
	if err := c.PeerGone(gone); err != nil {
		t.Errorf("PeerGone with a SEND in flight = %v", err)
	}
}
