package mad_test

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/rdmacm/mad"
)

// pattern returns n bytes that differ from their neighbours and from
// any shifted copy of themselves, so misplaced private data shows.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) ^ byte(i>>3)
	}
	return b
}

func gid(s string) mad.GID { return mad.GIDFromAddr(netip.MustParseAddr(s)) }

// sampleMessages holds one message of each type with every field set to a
// distinctive value, near the top of its range, and full private data.
func sampleMessages() []mad.Message {
	return []mad.Message{
		&mad.REQ{
			LocalCommID:             0x11223344,
			VendorID:                0x00c0ffee & 0xffffff,
			ServiceID:               mad.MakeServiceID(mad.PortSpaceIB, 0xbeef),
			LocalCAGUID:             0x0102030405060708,
			LocalQKey:               0x8badf00d,
			LocalQPN:                0xabcdef,
			ResponderResources:      0x5a,
			LocalEECN:               0x123456,
			InitiatorDepth:          0xa5,
			RemoteEECN:              0xfedcba,
			RemoteCMResponseTimeout: 0x15,
			TransportServiceType:    mad.TransportUC,
			EndToEndFlowControl:     true,
			StartingPSN:             0x987654,
			LocalCMResponseTimeout:  0x0b,
			RetryCount:              5,
			PKey:                    0x8001,
			PathMTU:                 mad.MTU4096,
			RDCExists:               true,
			RNRRetryCount:           6,
			MaxCMRetries:            0xd,
			SRQ:                     true,
			ExtendedTransportType:   mad.ExtendedTransportXRC,
			Primary: mad.Path{
				LocalLID: 0x1234, RemoteLID: 0x5678,
				LocalGID: gid("fe80::1:2:3:4"), RemoteGID: gid("2001:db8::99"),
				FlowLabel: 0xfedcb, PacketRate: 0x2b, TrafficClass: 0xb8, HopLimit: 0xfe,
				SL: 0xe, SubnetLocal: true, LocalACKTimeout: 0x1d,
			},
			Alternate: mad.Path{
				LocalLID: 0x4321, RemoteLID: 0x8765,
				LocalGID: gid("10.0.0.1"), RemoteGID: gid("10.0.0.2"),
				FlowLabel: 0x12345, PacketRate: 0x15, TrafficClass: 0x2e, HopLimit: 0x7f,
				SL: 0x7, SubnetLocal: false, LocalACKTimeout: 0x0e,
			},
			SAPSupported: true,
			PrivateData:  [mad.REQPrivateDataLen]byte(pattern(1, mad.REQPrivateDataLen)),
		},
		&mad.MRA{
			LocalCommID:    0xa1a2a3a4,
			RemoteCommID:   0xb1b2b3b4,
			MessageMRAed:   mad.MsgCodeLAP,
			ServiceTimeout: 0x1f,
			PrivateData:    [mad.MRAPrivateDataLen]byte(pattern(2, mad.MRAPrivateDataLen)),
		},
		&mad.REJ{
			LocalCommID:     0xc1c2c3c4,
			RemoteCommID:    0xd1d2d3d4,
			MessageRejected: mad.MsgCodeREP,
			RejectInfoLen:   mad.ARILen,
			Reason:          mad.RejectConsumerDefined,
			ARI:             [mad.ARILen]byte(pattern(3, mad.ARILen)),
			PrivateData:     [mad.REJPrivateDataLen]byte(pattern(4, mad.REJPrivateDataLen)),
		},
		&mad.REP{
			LocalCommID:         0xe1e2e3e4,
			RemoteCommID:        0xf1f2f3f4,
			LocalQKey:           0x01020304,
			LocalQPN:            0x0a0b0c,
			LocalEECN:           0x0d0e0f,
			StartingPSN:         0xfffffe,
			VendorID:            0x02c9aa,
			ResponderResources:  0x10,
			InitiatorDepth:      0x20,
			TargetACKDelay:      0x1e,
			FailoverAccepted:    mad.FailoverRejected,
			EndToEndFlowControl: true,
			RNRRetryCount:       3,
			SRQ:                 true,
			LocalCAGUID:         0xfffefdfcfbfaf9f8,
			PrivateData:         [mad.REPPrivateDataLen]byte(pattern(5, mad.REPPrivateDataLen)),
		},
		&mad.RTU{LocalCommID: 0x01010101, RemoteCommID: 0x02020202, PrivateData: [mad.RTUPrivateDataLen]byte(pattern(6, mad.RTUPrivateDataLen))},
		&mad.DREQ{LocalCommID: 0x03030303, RemoteCommID: 0x04040404, RemoteQPN: 0xfedcba, PrivateData: [mad.DREQPrivateDataLen]byte(pattern(7, mad.DREQPrivateDataLen))},
		&mad.DREP{LocalCommID: 0x05050505, RemoteCommID: 0x06060606, PrivateData: [mad.DREPPrivateDataLen]byte(pattern(8, mad.DREPPrivateDataLen))},
		&mad.SIDRREQ{
			RequestID:   0x07070707,
			PKey:        0x7fff,
			ServiceID:   mad.MakeServiceID(mad.PortSpaceUDP, 4791),
			PrivateData: [mad.SIDRREQPrivateDataLen]byte(pattern(9, mad.SIDRREQPrivateDataLen)),
		},
		&mad.SIDRREP{
			RequestID:     0x08080808,
			Status:        mad.SIDRRedirect,
			AddInfoLen:    mad.ARILen,
			VendorID:      0x123456,
			QPN:           0xffffff,
			ServiceID:     0xfedcba9876543210,
			QKey:          0x80010000,
			ClassPortInfo: [mad.ARILen]byte(pattern(10, mad.ARILen)),
			PrivateData:   [mad.SIDRREPPrivateDataLen]byte(pattern(11, mad.SIDRREPPrivateDataLen)),
		},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		t.Run(m.AttrID().String(), func(t *testing.T) {
			h := mad.Header{
				Status:        0x1234,
				ClassSpecific: 0x5678,
				TransactionID: 0x0123456789abcdef,
				AttrMod:       0xdeadbeef,
			}
			b, err := mad.Marshal(h, m)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != mad.MADLen {
				t.Fatalf("MAD is %d bytes", len(b))
			}
			if !bytes.Equal(b[:4], []byte{1, 0x07, 2, 0x03}) || b[16] != 0 || b[17] != byte(m.AttrID()) {
				t.Errorf("header % x", b[:mad.HeaderLen])
			}
			gh, gm, err := mad.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			wantH := h
			wantH.BaseVersion, wantH.MgmtClass, wantH.ClassVersion = 1, 0x07, 2
			wantH.Method, wantH.AttrID = mad.MethodSend, m.AttrID()
			if gh != wantH {
				t.Errorf("header %+v\nwant %+v", gh, wantH)
			}
			if !reflect.DeepEqual(gm, m) {
				t.Errorf("message %+v\nwant %+v", gm, m)
			}
			// The fields must not bleed into one another: the whole
			// private data area is where the layout says it is.
			pd := reflect.ValueOf(m).Elem().FieldByName("PrivateData")
			n := pd.Len()
			if got := b[mad.MADLen-n:]; !bytes.Equal(got, pd.Slice(0, n).Bytes()) {
				t.Errorf("private data is not the last %d bytes of the MAD", n)
			}
			// Appending keeps what the buffer held.
			prefix := []byte("prefix")
			b2, err := mad.AppendMAD(prefix, h, m)
			if err != nil || !bytes.Equal(b2[:6], prefix) || !bytes.Equal(b2[6:], b) {
				t.Errorf("AppendMAD after a prefix: %v", err)
			}
		})
	}
}

func TestNewMessage(t *testing.T) {
	for _, m := range sampleMessages() {
		n := mad.NewMessage(m.AttrID())
		if reflect.TypeOf(n) != reflect.TypeOf(m) {
			t.Errorf("NewMessage(%v) = %T, want %T", m.AttrID(), n, m)
		}
	}
	for _, a := range []mad.AttrID{0, mad.AttrClassPortInfo, mad.AttrLAP, mad.AttrAPR, 0x1b, 0xffff} {
		if n := mad.NewMessage(a); n != nil {
			t.Errorf("NewMessage(%v) = %T, want nil", a, n)
		}
	}
}

func validMAD(t *testing.T, m mad.Message) []byte {
	t.Helper()
	b, err := mad.Marshal(mad.Header{TransactionID: 1}, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeErrors(t *testing.T) {
	rtu := validMAD(t, &mad.RTU{})
	mod := func(b []byte, f func([]byte)) []byte {
		b = bytes.Clone(b)
		f(b)
		return b
	}
	var fe *mad.FieldError
	for _, c := range []struct {
		name string
		b    []byte
		want any // an error, or &fe for a *FieldError
		text string
	}{
		{"empty", nil, mad.ErrLength, "MAD is 0 bytes, want 256"},
		{"short", rtu[:255], mad.ErrLength, "MAD is 255 bytes"},
		{"header only", rtu[:24], mad.ErrLength, "24 bytes"},
		{"long", append(bytes.Clone(rtu), 0), mad.ErrLength, "257 bytes"},
		{"base version", mod(rtu, func(b []byte) { b[0] = 2 }), mad.ErrBaseVersion, "2 at MAD byte 0, want 1"},
		{"OPA base version", mod(rtu, func(b []byte) { b[0] = 0x80 }), mad.ErrBaseVersion, "128"},
		{"class", mod(rtu, func(b []byte) { b[1] = 0x03 }), mad.ErrClass, "management class 0x03 at MAD byte 1, want 0x07"},
		{"class version", mod(rtu, func(b []byte) { b[2] = 1 }), mad.ErrClassVersion, "1 at MAD byte 2, want 2"},
		{"method", mod(rtu, func(b []byte) { b[3] = 0x01 }), mad.ErrMethod, "Get at MAD byte 3"},
		{"response method", mod(rtu, func(b []byte) { b[3] = 0x83 }), mad.ErrMethod, "Method(0x83)"},
		{"unknown attribute", mod(rtu, func(b []byte) { b[17] = 0x42 }), mad.ErrAttrID, "0x0042 at MAD byte 16"},
		{"ClassPortInfo", mod(rtu, func(b []byte) { b[17] = 0x01 }), mad.ErrAttrID, "ClassPortInfo (0x0001)"},
		{"LAP", mod(rtu, func(b []byte) { b[17] = 0x19 }), mad.ErrAttrID, "LAP (0x0019)"},
		{"APR", mod(rtu, func(b []byte) { b[17] = 0x1a }), mad.ErrAttrID, "APR (0x001a)"},
		{"REJ info length", mod(validMAD(t, &mad.REJ{}), func(b []byte) { b[24+9] = 73 << 1 }), &fe,
			"REJ.RejectInfoLen at MAD byte 33: 0x49 exceeds 72"},
		{"REJ info length 127", mod(validMAD(t, &mad.REJ{}), func(b []byte) { b[24+9] = 0xff }), &fe, "0x7f exceeds 72"},
		{"REJ message 3", mod(validMAD(t, &mad.REJ{}), func(b []byte) { b[24+8] = 0xc0 }), &fe,
			"REJ.MessageRejected at MAD byte 32: 0x3 is reserved"},
		{"MRA message 3", mod(validMAD(t, &mad.MRA{}), func(b []byte) { b[24+8] = 0xff }), &fe,
			"MRA.MessageMRAed at MAD byte 32: 0x3 is reserved"},
		{"SIDR_REP info length", mod(validMAD(t, &mad.SIDRREP{}), func(b []byte) { b[24+5] = 200 }), &fe,
			"SIDR_REP.AddInfoLen at MAD byte 29: 0xc8 exceeds 72"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, m, err := mad.Decode(c.b)
			if err == nil {
				t.Fatalf("decoded %+v", m)
			}
			if m != nil {
				t.Errorf("message %T returned with error", m)
			}
			if target, ok := c.want.(**mad.FieldError); ok {
				if !errors.As(err, target) || !errors.Is(err, mad.ErrField) {
					t.Errorf("error %v is not a *FieldError", err)
				}
			} else if !errors.Is(err, c.want.(error)) {
				t.Errorf("error %v is not %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.text) || !strings.HasPrefix(err.Error(), "rdmacm/mad: ") {
				t.Errorf("error %q does not say %q", err, c.text)
			}
		})
	}
	// ParseMAD leaves method and attribute to the caller.
	lap := mod(rtu, func(b []byte) { b[3], b[17] = 0x01, 0x19 })
	if h, body, err := mad.ParseMAD(lap); err != nil || h.AttrID != mad.AttrLAP || h.Method != mad.MethodGet || len(body) != mad.BodyLen {
		t.Errorf("ParseMAD(LAP): %+v %d %v", h, len(body), err)
	}
	// The boundary values are accepted.
	if _, _, err := mad.Decode(mod(validMAD(t, &mad.REJ{}), func(b []byte) { b[24+9] = 72<<1 | 1; b[24+8] = 0xbf })); err != nil {
		t.Errorf("REJ with 72 bytes of ARI: %v", err)
	}
	if _, _, err := mad.Decode(mod(validMAD(t, &mad.SIDRREP{}), func(b []byte) { b[24+5] = 72 })); err != nil {
		t.Errorf("SIDR_REP with 72 bytes of info: %v", err)
	}
}

func TestUnmarshalBodyLength(t *testing.T) {
	for _, m := range sampleMessages() {
		for _, n := range []int{0, 1, mad.BodyLen - 1, mad.BodyLen + 1, mad.MADLen} {
			err := m.Unmarshal(make([]byte, n))
			if !errors.Is(err, mad.ErrLength) {
				t.Errorf("%T.Unmarshal(%d bytes): %v", m, n, err)
			}
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	for _, c := range []struct {
		m     mad.Message
		field string
	}{
		{&mad.REQ{LocalQPN: 1 << 24}, "REQ.LocalQPN at MAD byte 56: 0x1000000 does not fit in 24 bits"},
		{&mad.REQ{VendorID: 1 << 24}, "REQ.VendorID at MAD byte 29"},
		{&mad.REQ{LocalEECN: 1 << 24}, "REQ.LocalEECN"},
		{&mad.REQ{RemoteEECN: 1 << 24}, "REQ.RemoteEECN"},
		{&mad.REQ{RemoteCMResponseTimeout: 32}, "REQ.RemoteCMResponseTimeout at MAD byte 67: 0x20 does not fit in 5 bits"},
		{&mad.REQ{TransportServiceType: 4}, "REQ.TransportServiceType"},
		{&mad.REQ{StartingPSN: 1 << 24}, "REQ.StartingPSN"},
		{&mad.REQ{LocalCMResponseTimeout: 32}, "REQ.LocalCMResponseTimeout"},
		{&mad.REQ{RetryCount: 8}, "REQ.RetryCount"},
		{&mad.REQ{PathMTU: 16}, "REQ.PathMTU"},
		{&mad.REQ{RNRRetryCount: 8}, "REQ.RNRRetryCount"},
		{&mad.REQ{MaxCMRetries: 16}, "REQ.MaxCMRetries"},
		{&mad.REQ{ExtendedTransportType: 8}, "REQ.ExtendedTransportType"},
		{&mad.REQ{Primary: mad.Path{FlowLabel: 1 << 20}}, "REQ.Primary.FlowLabel at MAD byte 112: 0x100000 does not fit in 20 bits"},
		{&mad.REQ{Primary: mad.Path{PacketRate: 64}}, "REQ.Primary.PacketRate at MAD byte 115"},
		{&mad.REQ{Primary: mad.Path{SL: 16}}, "REQ.Primary.SL"},
		{&mad.REQ{Alternate: mad.Path{LocalACKTimeout: 32}}, "REQ.Alternate.LocalACKTimeout at MAD byte 163"},
		{&mad.MRA{MessageMRAed: 3}, "MRA.MessageMRAed at MAD byte 32: 0x3 is reserved"},
		{&mad.MRA{MessageMRAed: 4}, "MRA.MessageMRAed at MAD byte 32: 0x4 does not fit in 2 bits"},
		{&mad.MRA{ServiceTimeout: 32}, "MRA.ServiceTimeout"},
		{&mad.REJ{MessageRejected: 3}, "REJ.MessageRejected"},
		{&mad.REJ{RejectInfoLen: 73}, "REJ.RejectInfoLen at MAD byte 33: 0x49 exceeds 72"},
		{&mad.REP{LocalQPN: 1 << 24}, "REP.LocalQPN"},
		{&mad.REP{LocalEECN: 1 << 24}, "REP.LocalEECN"},
		{&mad.REP{StartingPSN: 1 << 24}, "REP.StartingPSN"},
		{&mad.REP{VendorID: 1 << 24}, "REP.VendorID"},
		{&mad.REP{TargetACKDelay: 32}, "REP.TargetACKDelay"},
		{&mad.REP{FailoverAccepted: 4}, "REP.FailoverAccepted"},
		{&mad.REP{RNRRetryCount: 8}, "REP.RNRRetryCount"},
		{&mad.DREQ{RemoteQPN: 1 << 24}, "DREQ.RemoteQPN"},
		{&mad.SIDRREP{AddInfoLen: 73}, "SIDR_REP.AddInfoLen"},
		{&mad.SIDRREP{VendorID: 1 << 24}, "SIDR_REP.VendorID"},
		{&mad.SIDRREP{QPN: 1 << 24}, "SIDR_REP.QPN"},
	} {
		buf := []byte("keep")
		b, err := c.m.Append(buf)
		var fe *mad.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%T.Append: error %v, want one naming %q", c.m, err, c.field)
		}
		if string(b) != "keep" {
			t.Errorf("%T.Append changed the buffer to %q on error", c.m, b)
		}
		if _, err := mad.Marshal(mad.Header{}, c.m); !errors.Is(err, mad.ErrField) {
			t.Errorf("Marshal(%T): %v", c.m, err)
		}
	}
	if _, err := mad.Marshal(mad.Header{AttrID: mad.AttrREP}, &mad.REQ{}); !errors.Is(err, mad.ErrAttrID) {
		t.Errorf("Marshal with a REP header and a REQ: %v", err)
	}
	if _, err := mad.Marshal(mad.Header{}, shortMessage{}); !errors.Is(err, mad.ErrLength) {
		t.Errorf("Marshal of a short body: %v", err)
	}
}

// shortMessage is a caller's Message whose body is too short.
type shortMessage struct{}

func (shortMessage) AttrID() mad.AttrID              { return mad.AttrLAP }
func (shortMessage) Unmarshal([]byte) error          { return nil }
func (shortMessage) Append(b []byte) ([]byte, error) { return append(b, 1, 2, 3), nil }

func TestHeaderDefaults(t *testing.T) {
	b, err := mad.Marshal(mad.Header{BaseVersion: 9, Method: mad.MethodGetResp, TransactionID: 7}, &mad.DREP{})
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := mad.ParseMAD(b)
	if !errors.Is(err, mad.ErrBaseVersion) || h.BaseVersion != 9 {
		t.Errorf("explicit base version not written as given: %+v %v", h, err)
	}
	if b[3] != 0x81 || b[15] != 7 || b[17] != 0x16 {
		t.Errorf("header % x", b[:24])
	}
}

func TestServiceID(t *testing.T) {
	for _, c := range []struct {
		ps   mad.PortSpace
		port uint16
		id   uint64
		str  string
	}{
		{mad.PortSpaceTCP, 7174, 0x0000000001061c06, "TCP:7174"},
		{mad.PortSpaceUDP, 4791, 0x00000000011112b7, "UDP:4791"},
		{mad.PortSpaceIB, 0, 0x00000000013f0000, "IB:0"},
		{mad.PortSpaceIPoIB, 0xffff, 0x000000000002ffff, "IPoIB:65535"},
	} {
		id := mad.MakeServiceID(c.ps, c.port)
		if uint64(id) != c.id || id.String() != c.str {
			t.Errorf("MakeServiceID(%v, %d) = %#x %q, want %#x %q", c.ps, c.port, uint64(id), id, c.id, c.str)
		}
		ps, port, ok := id.Split()
		if !ok || ps != c.ps || port != c.port {
			t.Errorf("%#x splits into %v %d %v", c.id, ps, port, ok)
		}
	}
	for _, id := range []mad.ServiceID{0x1000000001061c06, 0x0000000001071c06, 0, 0xffffffffffffffff} {
		if _, _, ok := id.Split(); ok {
			t.Errorf("%#x splits as an rdma_cm service ID", uint64(id))
		}
		if s := id.String(); !strings.HasPrefix(s, "0x") || len(s) != 18 {
			t.Errorf("%#x prints as %q", uint64(id), s)
		}
	}
}

func TestCMAHeader(t *testing.T) {
	for _, h := range []mad.CMAHeader{
		{Port: 51414, Src: netip.MustParseAddr("10.77.0.12"), Dst: netip.MustParseAddr("10.77.0.11")},
		{Port: 1, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("fe80::2")},
		{Port: 0xffff, Src: netip.MustParseAddr("::ffff:1.2.3.4"), Dst: netip.MustParseAddr("::1")},
	} {
		b, err := h.Append([]byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 1+mad.CMAHeaderLen || b[1] != 0 || int(b[2]>>4) != h.IPVersion() || b[2]&0xf != 0 {
			t.Errorf("%+v encodes as %x", h, b)
		}
		if h.IPVersion() == 4 && (!bytes.Equal(b[5:17], make([]byte, 12)) || !bytes.Equal(b[21:33], make([]byte, 12))) {
			t.Errorf("IPv4 padding not zero: %x", b)
		}
		got, rest, err := mad.ParseCMAHeader(append(b[1:], "user"...))
		if err != nil || got != h || string(rest) != "user" {
			t.Errorf("ParseCMAHeader: %+v %q %v, want %+v", got, rest, err, h)
		}
	}
	good, _ := (&mad.CMAHeader{Src: netip.MustParseAddr("1.1.1.1"), Dst: netip.MustParseAddr("2.2.2.2")}).Append(nil)
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:35], mad.ErrLength},
		{"empty", nil, mad.ErrLength},
		{"version", append([]byte{1}, good[1:]...), mad.ErrCMAVersion},
		{"IP version 0", append([]byte{0, 0x00}, good[2:]...), mad.ErrIPVersion},
		{"IP version 5", append([]byte{0, 0x50}, good[2:]...), mad.ErrIPVersion},
	} {
		if _, _, err := mad.ParseCMAHeader(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	for _, h := range []mad.CMAHeader{
		{},
		{Src: netip.MustParseAddr("1.1.1.1")},
		{Src: netip.MustParseAddr("1.1.1.1"), Dst: netip.MustParseAddr("::2")},
		{Src: netip.MustParseAddr("::1"), Dst: netip.MustParseAddr("2.2.2.2")},
	} {
		if b, err := h.Append([]byte("k")); !errors.Is(err, mad.ErrIPVersion) || string(b) != "k" {
			t.Errorf("%+v: %q %v", h, b, err)
		}
	}
}

func TestSetCMAPrivateData(t *testing.T) {
	h := mad.CMAHeader{Port: 4242, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	user := pattern(42, mad.REQUserPrivateDataLen)
	var req mad.REQ
	req.PrivateData = [mad.REQPrivateDataLen]byte(pattern(1, mad.REQPrivateDataLen)) // overwritten, padding included
	if err := req.SetCMAPrivateData(&h, user[:10]); err != nil {
		t.Fatal(err)
	}
	got, rest, err := req.CMAHeader()
	if err != nil || got != h || !bytes.Equal(rest[:10], user[:10]) || !bytes.Equal(rest[10:], make([]byte, 46)) {
		t.Errorf("REQ: %+v %x %v", got, rest, err)
	}
	if err := req.SetCMAPrivateData(&h, user); err != nil {
		t.Errorf("56 bytes: %v", err)
	}
	if err := req.SetCMAPrivateData(&h, make([]byte, 57)); !errors.Is(err, mad.ErrLength) {
		t.Errorf("57 bytes: %v", err)
	}
	var sidr mad.SIDRREQ
	if err := sidr.SetCMAPrivateData(&h, make([]byte, mad.SIDRREQUserPrivateDataLen)); err != nil {
		t.Errorf("SIDR_REQ, 180 bytes: %v", err)
	}
	if err := sidr.SetCMAPrivateData(&h, make([]byte, 181)); !errors.Is(err, mad.ErrLength) {
		t.Errorf("SIDR_REQ, 181 bytes: %v", err)
	}
	if got, rest, err := sidr.CMAHeader(); err != nil || got != h || len(rest) != 180 {
		t.Errorf("SIDR_REQ: %+v %d %v", got, len(rest), err)
	}
	if err := sidr.SetCMAPrivateData(&mad.CMAHeader{}, nil); !errors.Is(err, mad.ErrIPVersion) {
		t.Errorf("invalid header: %v", err)
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{mad.AttrREQ.String(), "REQ (0x0010)"},
		{mad.AttrSIDRREP.String(), "SIDR_REP (0x0018)"},
		{mad.AttrID(0x99).String(), "0x0099"},
		{mad.MTU1024.String(), "1024"},
		{mad.MTU(0).String(), "MTU(0)"},
		{mad.MTU(6).String(), "MTU(6)"},
		{mad.TransportRC.String(), "RC"},
		{mad.RejectConsumerDefined.String(), "consumer defined"},
		{mad.RejectInvalidAltFlowLabel.String(), "invalid alternate flow label"},
		{mad.RejectReason(34).String(), "RejectReason(34)"},
		{mad.RejectReason(0).String(), "RejectReason(0)"},
		{mad.SIDRNoQP.String(), "no QP"},
		{mad.SIDRStatus(6).String(), "SIDRStatus(6)"},
		{mad.MethodSend.String(), "Send"},
		{mad.PortSpaceTCP.String(), "TCP"},
		{mad.FailoverNotSupported.String(), "not supported"},
		{gid("10.77.0.11").String(), "10.77.0.11"},
		{gid("fe80::1").String(), "fe80::1"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// The reject reasons of IBTA vol. 1 Table 109 / enum ib_cm_rej_reason.
	for code, want := range map[mad.RejectReason]uint16{
		mad.RejectNoQP: 1, mad.RejectNoEEC: 2, mad.RejectNoResources: 3, mad.RejectTimeout: 4,
		mad.RejectUnsupported: 5, mad.RejectInvalidCommID: 6, mad.RejectInvalidCommInstance: 7,
		mad.RejectInvalidServiceID: 8, mad.RejectInvalidTransportType: 9, mad.RejectStaleConn: 10,
		mad.RejectRDCNotExist: 11, mad.RejectInvalidGID: 12, mad.RejectInvalidLID: 13,
		mad.RejectInvalidSL: 14, mad.RejectInvalidTrafficClass: 15, mad.RejectInvalidHopLimit: 16,
		mad.RejectInvalidPacketRate: 17, mad.RejectInvalidAltGID: 18, mad.RejectInvalidAltLID: 19,
		mad.RejectInvalidAltSL: 20, mad.RejectInvalidAltTrafficClass: 21, mad.RejectInvalidAltHopLimit: 22,
		mad.RejectInvalidAltPacketRate: 23, mad.RejectPortCMRedirect: 24, mad.RejectPortRedirect: 25,
		mad.RejectInvalidMTU: 26, mad.RejectInsufficientRespResources: 27, mad.RejectConsumerDefined: 28,
		mad.RejectInvalidRNRRetry: 29, mad.RejectDuplicateLocalCommID: 30, mad.RejectInvalidClassVersion: 31,
		mad.RejectInvalidFlowLabel: 32, mad.RejectInvalidAltFlowLabel: 33, mad.RejectVendorOptionNotSupported: 35,
	} {
		if uint16(code) != want || strings.HasPrefix(code.String(), "RejectReason(") {
			t.Errorf("reject reason %d (%v), want %d", code, code, want)
		}
	}
}
