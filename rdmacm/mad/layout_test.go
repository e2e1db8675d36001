package mad_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/rdmacm/mad"
)

// field is where a message field lives in the body, in the Byte[Bit]
// notation of the IBTA tables and Linux include/rdma/ibta_vol1_c12.h
// (bit 0 is the most significant bit of the byte), transcribed from those
// tables independently of the package's code.
type field struct {
	path       string // Go field, "Primary.FlowLabel"
	byte, bit  int
	width      int    // in bits
	value      uint64 // the value to test with; 0 means all ones
	fixedValue bool   // value is the only legal non-zero one to try
}

func pathFields(prefix string, off int) []field {
	return []field{
		{path: prefix + ".LocalLID", byte: off, width: 16},
		{path: prefix + ".RemoteLID", byte: off + 2, width: 16},
		{path: prefix + ".LocalGID", byte: off + 4, width: 128},
		{path: prefix + ".RemoteGID", byte: off + 20, width: 128},
		{path: prefix + ".FlowLabel", byte: off + 36, width: 20},
		{path: prefix + ".PacketRate", byte: off + 39, bit: 2, width: 6},
		{path: prefix + ".TrafficClass", byte: off + 40, width: 8},
		{path: prefix + ".HopLimit", byte: off + 41, width: 8},
		{path: prefix + ".SL", byte: off + 42, width: 4},
		{path: prefix + ".SubnetLocal", byte: off + 42, bit: 4, width: 1},
		{path: prefix + ".LocalACKTimeout", byte: off + 43, width: 5},
	}
}

var layouts = []struct {
	msg    func() mad.Message
	fields []field
}{
	{func() mad.Message { return new(mad.REQ) }, append(append([]field{
		{path: "LocalCommID", byte: 0, width: 32},
		{path: "VendorID", byte: 5, width: 24},
		{path: "ServiceID", byte: 8, width: 64},
		{path: "LocalCAGUID", byte: 16, width: 64},
		{path: "LocalQKey", byte: 28, width: 32},
		{path: "LocalQPN", byte: 32, width: 24},
		{path: "ResponderResources", byte: 35, width: 8},
		{path: "LocalEECN", byte: 36, width: 24},
		{path: "InitiatorDepth", byte: 39, width: 8},
		{path: "RemoteEECN", byte: 40, width: 24},
		{path: "RemoteCMResponseTimeout", byte: 43, width: 5},
		{path: "TransportServiceType", byte: 43, bit: 5, width: 2},
		{path: "EndToEndFlowControl", byte: 43, bit: 7, width: 1},
		{path: "StartingPSN", byte: 44, width: 24},
		{path: "LocalCMResponseTimeout", byte: 47, width: 5},
		{path: "RetryCount", byte: 47, bit: 5, width: 3},
		{path: "PKey", byte: 48, width: 16},
		{path: "PathMTU", byte: 50, width: 4},
		{path: "RDCExists", byte: 50, bit: 4, width: 1},
		{path: "RNRRetryCount", byte: 50, bit: 5, width: 3},
		{path: "MaxCMRetries", byte: 51, width: 4},
		{path: "SRQ", byte: 51, bit: 4, width: 1},
		{path: "ExtendedTransportType", byte: 51, bit: 5, width: 3},
		{path: "SAPSupported", byte: 139, bit: 5, width: 1},
		{path: "PrivateData", byte: 140, width: 92 * 8},
	}, pathFields("Primary", 52)...), pathFields("Alternate", 96)...)},
	{func() mad.Message { return new(mad.MRA) }, []field{
		{path: "LocalCommID", byte: 0, width: 32},
		{path: "RemoteCommID", byte: 4, width: 32},
		{path: "MessageMRAed", byte: 8, width: 2, value: 2, fixedValue: true},
		{path: "ServiceTimeout", byte: 9, width: 5},
		{path: "PrivateData", byte: 10, width: 222 * 8},
	}},
	{func() mad.Message { return new(mad.REJ) }, []field{
		{path: "LocalCommID", byte: 0, width: 32},
		{path: "RemoteCommID", byte: 4, width: 32},
		{path: "MessageRejected", byte: 8, width: 2, value: 2, fixedValue: true},
		{path: "RejectInfoLen", byte: 9, width: 7, value: 72, fixedValue: true},
		{path: "Reason", byte: 10, width: 16},
		{path: "ARI", byte: 12, width: 72 * 8},
		{path: "PrivateData", byte: 84, width: 148 * 8},
	}},
	{func() mad.Message { return new(mad.REP) }, []field{
		{path: "LocalCommID", byte: 0, width: 32},
		{path: "RemoteCommID", byte: 4, width: 32},
		{path: "LocalQKey", byte: 8, width: 32},
		{path: "LocalQPN", byte: 12, width: 24},
		{path: "LocalEECN", byte: 16, width: 24},
		{path: "StartingPSN", byte: 20, width: 24},
		{path: "ResponderResources", byte: 24, width: 8},
		{path: "InitiatorDepth", byte: 25, width: 8},
		{path: "TargetACKDelay", byte: 26, width: 5},
		{path: "FailoverAccepted", byte: 26, bit: 5, width: 2},
		{path: "EndToEndFlowControl", byte: 26, bit: 7, width: 1},
		{path: "RNRRetryCount", byte: 27, width: 3},
		{path: "SRQ", byte: 27, bit: 3, width: 1},
		{path: "LocalCAGUID", byte: 28, width: 64},
		{path: "PrivateData", byte: 36, width: 196 * 8},
		// VendorID is split over three bytes: see TestREPVendorID.
	}},
	{func() mad.Message { return new(mad.RTU) }, []field{
		{path: "LocalCommID", byte: 0, width: 32},
		{path: "RemoteCommID", byte: 4, width: 32},
		{path: "PrivateData", byte: 8, width: 224 * 8},
	}},
	{func() mad.Message { return new(mad.DREQ) }, []field{
		{path: "LocalCommID", byte: 0, width: 32},
		{path: "RemoteCommID", byte: 4, width: 32},
		{path: "RemoteQPN", byte: 8, width: 24},
		{path: "PrivateData", byte: 12, width: 220 * 8},
	}},
	{func() mad.Message { return new(mad.DREP) }, []field{
		{path: "LocalCommID", byte: 0, width: 32},
		{path: "RemoteCommID", byte: 4, width: 32},
		{path: "PrivateData", byte: 8, width: 224 * 8},
	}},
	{func() mad.Message { return new(mad.SIDRREQ) }, []field{
		{path: "RequestID", byte: 0, width: 32},
		{path: "PKey", byte: 4, width: 16},
		{path: "ServiceID", byte: 8, width: 64},
		{path: "PrivateData", byte: 16, width: 216 * 8},
	}},
	{func() mad.Message { return new(mad.SIDRREP) }, []field{
		{path: "RequestID", byte: 0, width: 32},
		{path: "Status", byte: 4, width: 8},
		{path: "AddInfoLen", byte: 5, width: 8, value: 72, fixedValue: true},
		{path: "QPN", byte: 8, width: 24},
		{path: "ServiceID", byte: 12, width: 64},
		{path: "QKey", byte: 20, width: 32},
		{path: "ClassPortInfo", byte: 24, width: 72 * 8},
		{path: "PrivateData", byte: 96, width: 136 * 8},
		// VendorID is split over three bytes: see TestSIDRREPVendorID.
	}},
}

// setField sets the field at path in m to v (all ones for value 0);
// arrays are filled with 0xff.
func setField(t *testing.T, m mad.Message, f field) {
	t.Helper()
	v := reflect.ValueOf(m).Elem()
	for _, name := range strings.Split(f.path, ".") {
		v = v.FieldByName(name)
		if !v.IsValid() {
			t.Fatalf("%T has no field %s", m, f.path)
		}
	}
	val := f.value
	if val == 0 && f.width < 64 {
		val = 1<<f.width - 1
	} else if val == 0 {
		val = ^uint64(0)
	}
	switch v.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(val)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Array:
		for i := range v.Len() {
			v.Index(i).SetUint(0xff)
		}
	default:
		t.Fatalf("%T.%s: unexpected kind %v", m, f.path, v.Kind())
	}
}

// placeBits sets the bits of f, with its test value, in body.
func placeBits(body []byte, f field) {
	start := f.byte*8 + f.bit
	for i := range f.width {
		on := true
		if f.value != 0 {
			on = f.value>>(f.width-1-i)&1 != 0
		}
		if on {
			n := start + i
			body[n/8] |= 0x80 >> (n % 8)
		}
	}
}

func body(t *testing.T, m mad.Message) []byte {
	t.Helper()
	b, err := m.Append(nil)
	if err != nil {
		t.Fatalf("%T.Append: %v", m, err)
	}
	if len(b) != mad.BodyLen {
		t.Fatalf("%T.Append gave %d bytes", m, len(b))
	}
	return b
}

// TestFieldLayout sets one field at a time and checks that exactly its
// bits, as the IBTA tables place them, are set in the encoded body, and
// that decoding gives the field back.
func TestFieldLayout(t *testing.T) {
	for _, l := range layouts {
		for _, f := range l.fields {
			m := l.msg()
			t.Run(fmt.Sprintf("%T.%s", m, f.path), func(t *testing.T) {
				setField(t, m, f)
				got := body(t, m)
				want := make([]byte, mad.BodyLen)
				placeBits(want, f)
				if !bytes.Equal(got, want) {
					t.Errorf("body differs at %s\n got %x\nwant %x", diffAt(got, want), got, want)
				}
				back := l.msg()
				if err := back.Unmarshal(got); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(back, m) {
					t.Errorf("decoded %+v\nwant %+v", back, m)
				}
			})
		}
	}
}

// TestReservedBitsIgnored decodes bodies with every bit set (but for the
// few fields whose all-ones value is refused) and checks that re-encoding
// keeps exactly the bits of the fields: reserved bits are dropped.
func TestReservedBitsIgnored(t *testing.T) {
	for _, l := range layouts {
		m := l.msg()
		t.Run(fmt.Sprintf("%T", m), func(t *testing.T) {
			in := bytes.Repeat([]byte{0xff}, mad.BodyLen)
			mask := make([]byte, mad.BodyLen)
			for _, f := range l.fields {
				if f.fixedValue { // write the legal value over the ones
					ones := f
					ones.value = 0
					clearBits(in, ones)
					placeBits(in, f)
				}
				ones := f
				ones.value = 0
				placeBits(mask, ones)
			}
			switch m.(type) { // the split vendor IDs
			case *mad.REP:
				mask[15], mask[19], mask[23] = 0xff, 0xff, 0xff
			case *mad.SIDRREP:
				mask[6], mask[7], mask[11] = 0xff, 0xff, 0xff
			}
			if err := m.Unmarshal(in); err != nil {
				t.Fatal(err)
			}
			got := body(t, m)
			want := make([]byte, mad.BodyLen)
			for i := range want {
				want[i] = in[i] & mask[i]
			}
			if !bytes.Equal(got, want) {
				t.Errorf("body differs at %s\n got %x\nwant %x", diffAt(got, want), got, want)
			}
		})
	}
}

func clearBits(body []byte, f field) {
	start := f.byte*8 + f.bit
	for i := range f.width {
		n := start + i
		body[n/8] &^= 0x80 >> (n % 8)
	}
}

func diffAt(a, b []byte) string {
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf("body byte %d (got %#02x want %#02x)", i, a[i], b[i])
		}
	}
	return "nowhere"
}

func TestREPVendorID(t *testing.T) {
	m := mad.REP{VendorID: 0xabcdef}
	b := body(t, &m)
	want := make([]byte, mad.BodyLen)
	want[15], want[19], want[23] = 0xab, 0xcd, 0xef
	if !bytes.Equal(b, want) {
		t.Errorf("got %x\nwant %x", b, want)
	}
	var back mad.REP
	if err := back.Unmarshal(b); err != nil || back != m {
		t.Errorf("decoded %+v, %v", back, err)
	}
}

func TestSIDRREPVendorID(t *testing.T) {
	m := mad.SIDRREP{VendorID: 0xabcdef}
	b := body(t, &m)
	want := make([]byte, mad.BodyLen)
	want[6], want[7], want[11] = 0xab, 0xcd, 0xef
	if !bytes.Equal(b, want) {
		t.Errorf("got %x\nwant %x", b, want)
	}
	var back mad.SIDRREP
	if err := back.Unmarshal(b); err != nil || back != m {
		t.Errorf("decoded %+v, %v", back, err)
	}
}
