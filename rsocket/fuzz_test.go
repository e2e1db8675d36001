package rsocket

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

func FuzzParseConnData(f *testing.F) {
	good := (&ConnData{Version: 1, Flags: connFlagIOMap, Credits: 384,
		TargetSGL: SGE{Addr: 0x7f0012345000, Key: 0x1234, Length: 2},
		DataBuf:   SGE{Addr: 0x7f0012400000, Key: 0x5678, Length: 65536}}).Marshal()
	f.Add(good)
	f.Add(append(append([]byte{}, good...), make([]byte, 156)...)) // padded as a REP's private data
	f.Add(good[:39])
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseConnData(b)
		if err != nil {
			return
		}
		if d.Version != Version || d.Credits == 0 || d.DataBuf.Length == 0 || d.TargetSGL.Length == 0 {
			t.Fatalf("accepted %+v", d)
		}
		// What parses marshals back to the same bytes, but for the
		// reserved ones.
		m := d.Marshal()
		want := append([]byte{}, b[:ConnDataLen]...)
		copy(want[4:7], []byte{0, 0, 0})
		if !bytes.Equal(m, want) {
			t.Fatalf("round trip: % x, want % x", m, want)
		}
	})
}

// testConn is a Conn with its memory registered on a software device
// and its state as after connecting, with no QP: what message and Read
// need.
func testConn(t testing.TB, cfg Config) *Conn {
	t.Helper()
	network := link.NewNetwork(1)
	l, err := network.Attach(netip.MustParseAddr("10.79.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rxe.NewDevice(rxe.Config{Name: "rs_fuzz", Links: []link.Link{l}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Dealloc() })
	c := newConn(&cfg)
	rw := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	if c.rmr, err = pd.RegMR(make([]byte, c.rbufSize), rw); err != nil {
		t.Fatal(err)
	}
	if c.tmr, err = pd.RegMR(make([]byte, sglSize*sgeLen), rw); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.release)
	c.init(ConnData{Version: 1, Credits: 16, TargetSGL: SGE{Length: 2}, DataBuf: SGE{Addr: 0x1000, Length: 4096}})
	c.connected = false // no credits go back: there is no QP
	return c
}

// FuzzMessages feeds a connection the immediates a peer could send,
// with the lengths their writes carried, and checks that it keeps its
// books: the data it queues fits the part of the ring it gave, every queued byte is read
// back, a bad peer ends the connection with an error instead of a
// panic, and the target SGL entries it takes are the ones written.
func FuzzMessages(f *testing.F) {
	rec := func(imm, n uint32) []byte {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, imm), n)
	}
	f.Add(append(rec(msg(opData, 100), 100), rec(msg(opData, 4000), 4000)...))
	f.Add(append(rec(msg(opSGL, 400), 16), rec(msg(opSGL, 800), 0)...))
	f.Add(append(rec(msg(opCtrl, ctrlShutdown), 0), rec(msg(opData, 1), 1)...))
	f.Add(rec(msg(opData, 8000), 8000)) // beyond the 4 KiB ring
	f.Add(append(rec(msg(opCtrl, ctrlDisconnect), 0), rec(msg(opIOMap, 3), 24)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := testConn(t, Config{RecvBuffer: 4096, QueueSize: 16})
		for i := range sglSize {
			putSGE(binary.LittleEndian, c.tmr.Buf()[i*sgeLen:], SGE{Addr: uint64(i + 1), Key: uint32(i + 10), Length: uint32(i + 100)})
		}
		queued := 0
		for ; len(in) >= 8; in = in[8:] {
			imm, n := binary.BigEndian.Uint32(in), binary.BigEndian.Uint32(in[4:])
			before := c.rqueued
			next := c.tgtNext
			c.message(imm, n)
			if c.rqueued > c.rbufSize/2 || c.rmsgLen > len(c.rmsg) {
				t.Fatalf("queued %d bytes in %d messages: beyond the %d bytes given", c.rqueued, c.rmsgLen, c.rbufSize/2)
			}
			queued += c.rqueued - before
			if msgOp(imm) == opSGL && n == sgeLen {
				if got := c.tgt[next]; got.Key != uint32(next+10) {
					t.Fatalf("SGL update took %+v into entry %d", got, next)
				}
			}
			if c.err != nil && (c.readable || c.writable) {
				t.Fatalf("failed with %v and still open", c.err)
			}
		}
		// Every byte queued is read back, in one call or several.
		buf := make([]byte, 1000)
		got := 0
		for c.rqueued > 0 {
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("Read with %d bytes queued: %v", c.rqueued, err)
			}
			got += n
		}
		if got != queued || c.rmsgLen != 0 || c.rbufAvail+c.rgiven != c.rbufSize {
			t.Fatalf("read %d of %d bytes; %d messages left; %d bytes free of %d", got, queued, c.rmsgLen, c.rbufAvail, c.rbufSize)
		}
	})
}
