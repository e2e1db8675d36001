package rxm

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"testing"
)

// The connect and accept data of a captured verbs;ofi_rxm handshake
// between two C programs on the kernel's rxe (after the verbs provider's
// length byte): flow control on, eager limit 16384, rx_size 128.
func TestConnectDataOfACapture(t *testing.T) {
	req, _ := hex.DecodeString("01020403608b01000040000080000000000000000801000000")
	c, err := ParseConnect(req)
	if err != nil || c.Port != 35680 || c.Flow != FlowPeerOn || c.RxSize != 128 || c.ConnID != 0x108<<32 {
		t.Fatalf("connect %+v %v", c, err)
	}
	if !bytes.Equal(c.Bytes(), req[:24]) {
		t.Fatalf("bytes %x, want %x", c.Bytes(), req[:24])
	}
	rep, _ := hex.DecodeString("00000000c9010000800000000100000000")
	a, ok := ParseAccept(rep)
	if !ok || a.ConnID != 0x1c9<<32 || a.RxSize != 128 || a.Flow != FlowPeerOn || !bytes.Equal(a.Bytes(), rep[:16]) {
		t.Fatalf("accept %+v", a)
	}
	for _, bad := range []string{"02020403", "01010403608b01000040000080000000000000000801000000", "01020403608b01000080000080000000000000000801000000"} {
		b, _ := hex.DecodeString(bad)
		if _, err := ParseConnect(b); err != ErrRefused {
			t.Errorf("%s: %v, want ErrRefused", bad, err)
		}
	}
}

// A SAR segment's header as C sends it: segment 0 of a 64 KiB message,
// 16 KiB long, FIRST in ctrl_data.
func TestSegmentHeaderOfACapture(t *testing.T) {
	b, _ := hex.DecodeString("0401004000000000000000000000000001000000000000000100000000000000" +
		"0200000000000000000001000000000000000000000000000000000000000000")
	p, ok := ParsePkt(b)
	if !ok || p.Ctrl != CtrlSeg || p.SegSize != 16384 || p.SegNo != 0 || p.MsgID != 1 || p.CtrlData&3 != SegFirst || p.Size != 65536 {
		t.Fatalf("%+v", p)
	}
	out := make([]byte, PktLen)
	p.Marshal(out)
	if !bytes.Equal(out, b) {
		t.Fatalf("marshal %x, want %x", out, b)
	}
	SetConnID(out, 0x1234)
	if q, _ := ParsePkt(out); q.ConnID != 0x1234 || q.MsgID != 1 || q.Size != 65536 {
		t.Fatalf("after SetConnID: %+v", q)
	}
}

// FuzzParse: no input makes the parsers panic, and what they take comes
// back the same through its layout.
func FuzzParse(f *testing.F) {
	f.Add(make([]byte, 104))
	f.Add(Connect{Port: 1, Flow: FlowPeerOff, EagerLimit: EagerLimit, RxSize: 4, ConnID: 9}.Bytes())
	f.Add(RndvHdr([]IOV{{1, 2, 3}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, ok := ParsePkt(b); ok {
			out := make([]byte, PktLen)
			p.Marshal(out)
			if q, _ := ParsePkt(out); q != p {
				t.Fatalf("packet %+v came back as %+v", p, q)
			}
		}
		if c, err := ParseConnect(b); err == nil {
			if d, err := ParseConnect(c.Bytes()); err != nil || d != c {
				t.Fatalf("connect %+v came back as %+v %v", c, d, err)
			}
		}
		if a, ok := ParseAccept(b); ok {
			if d, _ := ParseAccept(a.Bytes()); d != a {
				t.Fatalf("accept %+v came back as %+v", a, d)
			}
		}
		if iov, ok := ParseRndvHdr(b); ok {
			if got, _ := ParseRndvHdr(RndvHdr(iov)); len(got) != len(iov) || got[0] != iov[0] {
				t.Fatalf("rendezvous %v came back as %v", iov, got)
			}
		}
	})
}

// Crossing requests are settled by address as C's rxm_process_connreq
// settles them.
func TestResolveClashAsC(t *testing.T) {
	lo, hi := netip.MustParseAddrPort("10.77.0.1:40000"), netip.MustParseAddrPort("10.77.0.11:30000")
	for _, c := range []struct {
		name        string
		ready       bool
		oldPID, pid uint64
		peer, self  netip.AddrPort
		want        Clash
	}{
		{"crossing, the peer lower: ours goes on", false, 0, 7, lo, hi, RefuseAlready},
		{"crossing, the peer higher: theirs goes on", false, 0, 7, hi, lo, Replace},
		{"same address and port: ourselves", false, 0, 7, lo, lo, Loopback},
		{"same address, lower port", false, 0, 7, netip.MustParseAddrPort("10.77.0.1:1"), lo, RefuseAlready},
		{"IPv4-mapped is the same address", false, 0, 7, netip.MustParseAddrPort("[::ffff:10.77.0.1]:40000"), lo, Loopback},
		{"connected, same process: refused", true, 7, 7, hi, lo, RefuseAlready},
		{"connected, a new process: replaced", true, 7, 8, lo, hi, Replace},
	} {
		if got := ResolveClash(c.ready, c.oldPID, c.pid, c.peer, c.self); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
