package mad_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/rdmago/rdmago/rdmacm/mad"
)

// subset reports whether every bit set in out is set in in: re-encoding a
// decoded message may only drop (reserved) bits, never invent any.
func subset(out, in []byte) bool {
	if len(out) != len(in) {
		return false
	}
	for i := range out {
		if out[i]&^in[i] != 0 {
			return false
		}
	}
	return true
}

func addSeeds(f *testing.F) [][]byte {
	var mads [][]byte
	for _, c := range cmMADs(f, rpingPackets(f)) {
		mads = append(mads, bytes.Clone(c.packet.Payload))
	}
	for _, m := range sampleMessages() {
		b, err := mad.Marshal(mad.Header{TransactionID: 0x1122334455667788, AttrMod: 9}, m)
		if err != nil {
			f.Fatal(err)
		}
		mads = append(mads, b)
	}
	return mads
}

// FuzzParseMAD feeds arbitrary bytes to Decode (and ParseMAD). Errors are
// fine; panics are not. A MAD that decodes must re-encode, to a MAD that
// decodes to the same header and message and re-encodes to the same
// bytes, and that holds no bit the input did not.
func FuzzParseMAD(f *testing.F) {
	for _, b := range addSeeds(f) {
		f.Add(b)
		f.Add(b[:100])
		bad := bytes.Clone(b)
		bad[24+9] = 0xff // a REJ's reject info length, a REQ's initiator depth...
		f.Add(bad)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ph, body, perr := mad.ParseMAD(b)
		h, m, err := mad.Decode(b)
		if perr != nil {
			if err == nil {
				t.Fatalf("ParseMAD fails (%v) but Decode does not", perr)
			}
			return
		}
		if len(body) != mad.BodyLen || ph != h {
			t.Fatalf("ParseMAD: %d-byte body, header %+v vs %+v", len(body), ph, h)
		}
		if err != nil {
			if m != nil {
				t.Fatalf("Decode returned %T and error %v", m, err)
			}
			return
		}
		out, err := mad.Marshal(h, m)
		if err != nil {
			t.Fatalf("decoded %s does not re-encode: %v", h.AttrID, err)
		}
		if !subset(out, b) {
			t.Fatalf("re-encoded MAD sets bits the input did not\n in %x\nout %x", b, out)
		}
		h2, m2, err := mad.Decode(out)
		if err != nil {
			t.Fatalf("re-encoded MAD does not decode: %v", err)
		}
		if h2 != h || !reflect.DeepEqual(m2, m) {
			t.Fatalf("decode→encode→decode changed the message\n got %+v %+v\nwant %+v %+v", h2, m2, h, m)
		}
		out2, err := mad.Marshal(h2, m2)
		if err != nil || !bytes.Equal(out2, out) {
			t.Fatalf("second encoding differs (%v)\n got %x\nwant %x", err, out2, out)
		}
		// rdma_cm's header, where rdma_cm puts one.
		var cma interface {
			CMAHeader() (mad.CMAHeader, []byte, error)
		}
		switch m := m.(type) {
		case *mad.REQ:
			cma = m
		case *mad.SIDRREQ:
			cma = m
		default:
			return
		}
		if ch, _, err := cma.CMAHeader(); err == nil {
			if _, err := ch.Append(nil); err != nil {
				t.Fatalf("parsed cma_hdr %+v does not encode: %v", ch, err)
			}
		}
	})
}

// FuzzMessage feeds arbitrary bodies to the Unmarshal method of every
// message type, chosen by the first argument, with the same checks as
// FuzzParseMAD.
func FuzzMessage(f *testing.F) {
	for _, b := range addSeeds(f) {
		f.Add(b[17]-0x10, b[mad.HeaderLen:])
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		attr := mad.AttrREQ + mad.AttrID(kind%9)
		m := mad.NewMessage(attr)
		if err := m.Unmarshal(body); err != nil {
			return
		}
		out, err := m.Append(nil)
		if err != nil {
			t.Fatalf("decoded %v does not re-encode: %v", attr, err)
		}
		if !subset(out, body) {
			t.Fatalf("re-encoded %v sets bits the input did not\n in %x\nout %x", attr, body, out)
		}
		m2 := mad.NewMessage(attr)
		if err := m2.Unmarshal(out); err != nil {
			t.Fatalf("re-encoded %v does not decode: %v", attr, err)
		}
		if !reflect.DeepEqual(m2, m) {
			t.Fatalf("decode→encode→decode changed the %v\n got %+v\nwant %+v", attr, m2, m)
		}
		if out2, err := m2.Append(nil); err != nil || !bytes.Equal(out2, out) {
			t.Fatalf("second encoding differs (%v)", err)
		}
	})
}

// FuzzCMAHeader feeds arbitrary private data to ParseCMAHeader.
func FuzzCMAHeader(f *testing.F) {
	for _, b := range addSeeds(f) {
		if b[17] == byte(mad.AttrREQ) {
			f.Add(b[mad.HeaderLen+140:])
		}
		if b[17] == byte(mad.AttrSIDRREQ) {
			f.Add(b[mad.HeaderLen+16:])
		}
	}
	f.Add(make([]byte, 36))
	f.Add([]byte{0, 0x60, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, rest, err := mad.ParseCMAHeader(b)
		if err != nil {
			return
		}
		if len(rest) != len(b)-mad.CMAHeaderLen {
			t.Fatalf("%d bytes left of %d", len(rest), len(b))
		}
		out, err := h.Append(nil)
		if err != nil {
			t.Fatalf("parsed %+v does not encode: %v", h, err)
		}
		if !subset(out, b[:mad.CMAHeaderLen]) {
			t.Fatalf("re-encoded header sets bits the input did not\n in %x\nout %x", b[:mad.CMAHeaderLen], out)
		}
		h2, rest2, err := mad.ParseCMAHeader(out)
		if err != nil || h2 != h || len(rest2) != 0 {
			t.Fatalf("decode→encode→decode: %+v %v, want %+v", h2, err, h)
		}
	})
}
