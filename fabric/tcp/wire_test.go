package tcp

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The frames of a captured C fi_pingpong -p tcp -e msg -S 64 run.
func TestHeadersParseAsCapturedFromC(t *testing.T) {
	for _, c := range []struct {
		name    string
		hex     string
		op      uint8
		flags   uint16
		opData  uint8
		size    uint64
		payload uint64
	}{
		{"64-byte send", "03 00 0000 00 00 10 00 5000000000000000", opMsg, 0, 0, 80, 64},
		{"fin with delivery-complete", "03 00 0400 00 00 10 00 1400000000000000", opMsg, flagDeliveryComplete, 0, 20, 4},
		{"ack", "03 00 0000 02 00 10 00 1000000000000000", opMsg, 0, opDataAck, 16, 0},
		{"msg with a stale rma_iov_cnt", "03 00 0000 00 01 10 00 2000000000000000", opMsg, 0, 0, 32, 16},
	} {
		h, err := parseHeader(unhex(t, c.hex))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if h.op != c.op || h.flags != c.flags || h.opData != c.opData || h.size != c.size || h.payload() != c.payload {
			t.Errorf("%s: parsed %+v", c.name, h)
		}
	}
	// And what we build for the same is what C sends.
	b := make([]byte, maxHdrLen)
	n := marshalHeader(b, &header{op: opMsg, flags: flagDeliveryComplete}, 4)
	if want := unhex(t, "03 00 0400 00 00 10 00 1400000000000000"); !bytes.Equal(b[:n], want) {
		t.Errorf("fin header % x, want % x", b[:n], want)
	}
	if want := unhex(t, "03 00 0000 02 00 10 00 1000000000000000"); !bytes.Equal(ackFrame, want) {
		t.Errorf("ack % x, want % x", ackFrame, want)
	}
}

func TestConnectionMessagesMatchC(t *testing.T) {
	req := unhex(t, "03 00 0000 00000000 0000000000000000 0000000000000000 0100000000000000")
	if got := marshalCM(cmConnReq, nil); !bytes.Equal(got, req) {
		t.Errorf("CONNREQ % x, want % x", got, req)
	}
	typ, n, err := parseCMHeader(unhex(t, "03 01 0000 00000000 0000000000000000 0000000000000000 0100000000000000"))
	if err != nil || typ != cmConnResp || n != 0 {
		t.Errorf("CONNRESP: %d %d %v", typ, n, err)
	}
	withData := marshalCM(cmConnReq, []byte("hello"))
	if typ, n, err := parseCMHeader(withData[:cmHeaderLen]); err != nil || typ != cmConnReq || n != 5 || withData[3] != 5 {
		t.Errorf("private data length: %d %d %v (% x)", typ, n, err, withData[:4])
	}
	// A NACK carries no endianness probe.
	if _, _, err := parseCMHeader(marshalCM(cmNack, nil)); err != nil {
		t.Errorf("NACK: %v", err)
	}
}

func TestMalformedFramesAreRefused(t *testing.T) {
	for _, c := range []struct{ name, hex string }{
		{"version 2", "02 00 0000 00 00 10 00 1000000000000000"},
		{"unknown op", "03 05 0000 00 00 10 00 1000000000000000"},
		{"header under 16", "03 00 0000 00 00 08 00 1000000000000000"},
		{"header not a multiple of 8", "03 00 0000 00 00 11 00 1100000000000000"},
		{"size under the header", "03 00 0000 00 00 10 00 0800000000000000"},
		{"ack with a payload", "03 00 0000 02 00 10 00 1100000000000000"},
		{"write without iovs", "03 04 0000 00 00 10 00 2000000000000000"},
		{"tagged without a tag", "03 01 0000 00 00 10 00 1000000000000000"},
	} {
		b := unhex(t, c.hex)
		if hs, err := parseBase(b); err == nil {
			if _, err := parseHeader(b[:min(hs, len(b))]); err == nil {
				t.Errorf("%s: accepted", c.name)
			}
		}
	}
	for _, c := range []struct{ name, hex string }{
		{"version", "02 00 0000 00000000 0000000000000000 0000000000000000 0100000000000000"},
		{"big-endian peer", "03 00 0000 00000000 0000000000000000 0000000000000000 0000000000000001"},
		{"private data over 256", "03 00 0101 00000000 0000000000000000 0000000000000000 0100000000000000"},
	} {
		if _, _, err := parseCMHeader(unhex(t, c.hex)); err == nil {
			t.Errorf("CM %s: accepted", c.name)
		}
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	for _, h := range []header{
		{op: opMsg},
		{op: opMsg, flags: flagRemoteCQData, cqData: 0x1122334455667788},
		{op: opMsg, flags: flagTagged, tag: 1234},
		{op: opMsg, flags: flagTagged | flagRemoteCQData, tag: 9, cqData: 8},
		{op: opWrite, iov: []rmaIOV{{100, 10, 42}}},
		{op: opWrite, flags: flagRemoteCQData | flagDeliveryComplete, cqData: 5, iov: []rmaIOV{{0, 4, 1}, {8, 6, 2}}},
		{op: opReadReq, iov: []rmaIOV{{64, 4096, 7}}},
		{op: opReadRsp},
	} {
		var payload uint64
		for _, v := range h.iov {
			payload += v.len
		}
		if h.op == opReadReq {
			payload = 0
		}
		b := make([]byte, maxHdrLen)
		n := marshalHeader(b, &h, payload)
		got, err := parseHeader(b[:n])
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if got.op != h.op || got.flags != h.flags || got.cqData != h.cqData || got.tag != h.tag || len(got.iov) != len(h.iov) || got.payload() != payload {
			t.Errorf("round trip %+v -> %+v", h, got)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 0, 0, 16, 0, 80, 0, 0, 0, 0, 0, 0, 0})
	b := make([]byte, maxHdrLen)
	n := marshalHeader(b, &header{op: opWrite, flags: flagRemoteCQData, cqData: 5, iov: []rmaIOV{{0, 4, 1}, {8, 6, 2}}}, 10)
	f.Add(b[:n])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < baseHdrLen {
			return
		}
		hs, err := parseBase(b[:baseHdrLen])
		if err != nil || hs > len(b) {
			return
		}
		h, err := parseHeader(b[:hs])
		if err != nil {
			return
		}
		if h.hdrSize != hs || h.size < uint64(hs) || len(h.iov) > maxIOV {
			t.Fatalf("accepted an inconsistent header %+v", h)
		}
	})
}

func FuzzParseCMHeader(f *testing.F) {
	f.Add(marshalCM(cmConnReq, []byte("data")))
	f.Add(marshalCM(cmNack, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, n, err := parseCMHeader(b)
		if err == nil && (n > maxCMData || len(b) < cmHeaderLen) {
			t.Fatalf("accepted type %d with %d bytes of data from % x", typ, n, b)
		}
	})
}
