package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes of a MAD and its parts.
const (
	MADLen    = 256                // a whole MAD
	HeaderLen = 24                 // the common MAD header
	BodyLen   = MADLen - HeaderLen // the CM message body (IBTA's "MAD data")
)

// Values of the header's version and class fields for the CM.
const (
	BaseVersion    = 1    // IB_MGMT_BASE_VERSION
	MgmtClassCM    = 0x07 // IB_MGMT_CLASS_CM
	CMClassVersion = 2    // IB_CM_CLASS_VERSION
)

// QP1QKey is the well-known Q_Key of QP 1, the general services QP to which
// CM MADs are sent (IB_QP1_QKEY).
const QP1QKey = 0x80010000

// Method is the method byte of a MAD header: the method proper in the low
// seven bits and the response flag in the high bit.
type Method uint8

// Methods of the CM class (IBTA vol. 1 ch. 12). CM messages use Send; the
// others only serve the ClassPortInfo attribute.
const (
	MethodGet     Method = 0x01
	MethodSet     Method = 0x02
	MethodSend    Method = 0x03
	MethodGetResp Method = 0x81
)

// MethodResponse is the R bit of the method byte.
const MethodResponse Method = 0x80

// String returns the method's IBTA name, or its value in hex.
func (m Method) String() string {
	switch m {
	case MethodGet:
		return "Get"
	case MethodSet:
		return "Set"
	case MethodSend:
		return "Send"
	case MethodGetResp:
		return "GetResp"
	}
	return fmt.Sprintf("Method(0x%02x)", uint8(m))
}

// Errors returned by the parsers. Each is wrapped with the details of the
// MAD at hand; test for them with errors.Is.
var (
	// ErrLength means a MAD is not 256 bytes, a body not 232 bytes, or
	// private data too short or too long for where it goes.
	ErrLength = errors.New("rdmacm/mad: bad length")
	// ErrBaseVersion means the MAD's base version is not 1.
	ErrBaseVersion = errors.New("rdmacm/mad: unsupported MAD base version")
	// ErrClass means the MAD's management class is not the CM's (0x07).
	ErrClass = errors.New("rdmacm/mad: not a CM MAD")
	// ErrClassVersion means the CM class version is not 2.
	ErrClassVersion = errors.New("rdmacm/mad: unsupported CM class version")
	// ErrMethod means a CM message came with another method than Send.
	ErrMethod = errors.New("rdmacm/mad: CM message method is not Send")
	// ErrAttrID means the attribute ID names no CM message this package
	// implements (including LAP and APR).
	ErrAttrID = errors.New("rdmacm/mad: unsupported CM attribute")
	// ErrField means a field holds a value the spec reserves, or, when
	// encoding, one that does not fit its bits. It is the Unwrap of every
	// [*FieldError].
	ErrField = errors.New("rdmacm/mad: bad field")
	// ErrCMAVersion means an rdma_cm private-data header has a version
	// other than 0.
	ErrCMAVersion = errors.New("rdmacm/mad: unsupported rdma_cm header version")
	// ErrIPVersion means an rdma_cm private-data header names an IP
	// version other than 4 or 6, or, when encoding, that its addresses
	// are invalid or of different families.
	ErrIPVersion = errors.New("rdmacm/mad: bad rdma_cm IP version")
)

// FieldError reports a field whose value is reserved or meaningless in a
// received message, or does not fit its bits in one being encoded.
// It unwraps to [ErrField].
type FieldError struct {
	Msg    string // the message: "REQ", "REJ", "SIDR_REP", ...
	Field  string // the Go field, e.g. "Primary.FlowLabel"
	Offset int    // byte offset of the field in the MAD
	Value  uint64 // the offending value
	Reason string // what is wrong with it, e.g. "does not fit in 20 bits"
}

// Error names the message, the field, its offset and value, and the
// problem.
func (e *FieldError) Error() string {
	return fmt.Sprintf("rdmacm/mad: %s.%s at MAD byte %d: %#x %s", e.Msg, e.Field, e.Offset, e.Value, e.Reason)
}

// Unwrap returns ErrField.
func (e *FieldError) Unwrap() error { return ErrField }

// Header is the common MAD header (IBTA vol. 1 §13.4; struct ib_mad_hdr).
// Its 16 reserved bits (MAD bytes 18-19) are ignored by ParseMAD and sent
// as zero.
type Header struct {
	BaseVersion   uint8  // 1
	MgmtClass     uint8  // 0x07 for the CM
	ClassVersion  uint8  // 2 for the CM
	Method        Method // MethodSend for every CM message
	Status        uint16 // 0 in CM messages
	ClassSpecific uint16
	// TransactionID pairs a request with its reply: Linux's CM puts the
	// MAD agent's high TID in the top 32 bits and the local communication
	// ID, in memory order, in the low ones, and answers with the TID of
	// the message it answers.
	TransactionID uint64
	AttrID        AttrID
	// AttrMod is the attribute modifier. Linux carries the enhanced
	// connection establishment (ECE) options of REQ, REP and SIDR_REP in
	// it; it is 0 otherwise.
	AttrMod uint32
}

// Offsets of the header fields in a MAD.
const (
	offBaseVersion   = 0
	offMgmtClass     = 1
	offClassVersion  = 2
	offMethod        = 3
	offStatus        = 4
	offClassSpecific = 6
	offTID           = 8
	offAttrID        = 16
	offAttrMod       = 20
)

// ParseMAD parses b, a whole 256-byte CM MAD such as the payload of a UD
// SEND_ONLY to QP 1. It checks the length, the base version (1), the
// management class (0x07) and the class version (2), and returns the header
// and the 232-byte body, which aliases b. It does not look at the method or
// the attribute: see [Decode].
func ParseMAD(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) != MADLen {
		return h, nil, fmt.Errorf("%w: MAD is %d bytes, want %d", ErrLength, len(b), MADLen)
	}
	h = Header{
		BaseVersion:   b[offBaseVersion],
		MgmtClass:     b[offMgmtClass],
		ClassVersion:  b[offClassVersion],
		Method:        Method(b[offMethod]),
		Status:        binary.BigEndian.Uint16(b[offStatus:]),
		ClassSpecific: binary.BigEndian.Uint16(b[offClassSpecific:]),
		TransactionID: binary.BigEndian.Uint64(b[offTID:]),
		AttrID:        AttrID(binary.BigEndian.Uint16(b[offAttrID:])),
		AttrMod:       binary.BigEndian.Uint32(b[offAttrMod:]),
	}
	switch {
	case h.BaseVersion != BaseVersion:
		return h, nil, fmt.Errorf("%w %d at MAD byte %d, want %d", ErrBaseVersion, h.BaseVersion, offBaseVersion, BaseVersion)
	case h.MgmtClass != MgmtClassCM:
		return h, nil, fmt.Errorf("%w: management class 0x%02x at MAD byte %d, want 0x%02x", ErrClass, h.MgmtClass, offMgmtClass, MgmtClassCM)
	case h.ClassVersion != CMClassVersion:
		return h, nil, fmt.Errorf("%w %d at MAD byte %d, want %d", ErrClassVersion, h.ClassVersion, offClassVersion, CMClassVersion)
	}
	return h, b[HeaderLen:MADLen:MADLen], nil
}

// Message is a CM message body. The types of this package implement it
// with pointer receivers (*REQ, *REP, ...); a caller may implement it for
// messages the package leaves out, such as LAP and APR.
type Message interface {
	// AttrID returns the attribute ID that names the message.
	AttrID() AttrID
	// Unmarshal decodes a 232-byte body into the message, overwriting
	// every field. It never panics.
	Unmarshal(body []byte) error
	// Append appends the message's 232-byte body to b. It fails, leaving
	// b as it was, if a field does not fit its bits.
	Append(b []byte) ([]byte, error)
}

// NewMessage returns a new zero message of the type attr names, or nil if
// the package does not implement it.
func NewMessage(attr AttrID) Message {
	switch attr {
	case AttrREQ:
		return new(REQ)
	case AttrMRA:
		return new(MRA)
	case AttrREJ:
		return new(REJ)
	case AttrREP:
		return new(REP)
	case AttrRTU:
		return new(RTU)
	case AttrDREQ:
		return new(DREQ)
	case AttrDREP:
		return new(DREP)
	case AttrSIDRREQ:
		return new(SIDRREQ)
	case AttrSIDRREP:
		return new(SIDRREP)
	}
	return nil
}

// Decode parses b, a whole CM MAD, into its header and message: it does
// what [ParseMAD] does, then checks that the method is Send and that the
// attribute is one of the nine messages the package implements, and
// unmarshals the body into a new message of that type (*REQ, *REP, ...).
// The message does not alias b.
func Decode(b []byte) (Header, Message, error) {
	h, body, err := ParseMAD(b)
	if err != nil {
		return h, nil, err
	}
	if h.Method != MethodSend {
		return h, nil, fmt.Errorf("%w: %s at MAD byte %d with attribute %s", ErrMethod, h.Method, offMethod, h.AttrID)
	}
	m := NewMessage(h.AttrID)
	if m == nil {
		return h, nil, fmt.Errorf("%w %s at MAD byte %d", ErrAttrID, h.AttrID, offAttrID)
	}
	if err := m.Unmarshal(body); err != nil {
		return h, nil, err
	}
	return h, m, nil
}

// AppendMAD appends to b the 256-byte MAD carrying m under header h. Zero
// header fields take the CM's values: BaseVersion 1, MgmtClass 0x07,
// ClassVersion 2, Method Send and m's attribute ID; other values are
// written as given. It fails, leaving b as it was, if h.AttrID is set and
// differs from m's, if m does not fit (see the messages' Append methods),
// or if m's Append does not produce exactly 232 bytes.
func AppendMAD(b []byte, h Header, m Message) ([]byte, error) {
	if h.AttrID == 0 {
		h.AttrID = m.AttrID()
	} else if h.AttrID != m.AttrID() {
		return b, fmt.Errorf("%w: header attribute %s, message %s", ErrAttrID, h.AttrID, m.AttrID())
	}
	if h.BaseVersion == 0 {
		h.BaseVersion = BaseVersion
	}
	if h.MgmtClass == 0 {
		h.MgmtClass = MgmtClassCM
	}
	if h.ClassVersion == 0 {
		h.ClassVersion = CMClassVersion
	}
	if h.Method == 0 {
		h.Method = MethodSend
	}
	start := len(b)
	b = h.Append(b)
	out, err := m.Append(b)
	if err != nil {
		return b[:start], err
	}
	if len(out)-start != MADLen {
		return b[:start], fmt.Errorf("%w: %s body is %d bytes, want %d", ErrLength, h.AttrID, len(out)-start-HeaderLen, BodyLen)
	}
	return out, nil
}

// Marshal returns the 256-byte MAD carrying m under header h; see
// [AppendMAD].
func Marshal(h Header, m Message) ([]byte, error) {
	return AppendMAD(make([]byte, 0, MADLen), h, m)
}

// Append appends the 24-byte header to b, exactly as given.
func (h *Header) Append(b []byte) []byte {
	b, p := grow(b, HeaderLen)
	p[offBaseVersion] = h.BaseVersion
	p[offMgmtClass] = h.MgmtClass
	p[offClassVersion] = h.ClassVersion
	p[offMethod] = uint8(h.Method)
	binary.BigEndian.PutUint16(p[offStatus:], h.Status)
	binary.BigEndian.PutUint16(p[offClassSpecific:], h.ClassSpecific)
	binary.BigEndian.PutUint64(p[offTID:], h.TransactionID)
	binary.BigEndian.PutUint16(p[offAttrID:], uint16(h.AttrID))
	p[18], p[19] = 0, 0
	binary.BigEndian.PutUint32(p[offAttrMod:], h.AttrMod)
	return b
}

// grow extends b by n zero bytes, reallocating only when its capacity is
// short, and returns the extended slice and the new bytes.
func grow(b []byte, n int) ([]byte, []byte) {
	start := len(b)
	if start+n <= cap(b) {
		b = b[:start+n]
		clear(b[start:])
	} else {
		nb := make([]byte, start+n, 2*start+n)
		copy(nb, b)
		b = nb
	}
	return b, b[start:]
}

// checkBody reports whether body has the length of a CM message body.
func checkBody(msg string, body []byte) error {
	if len(body) != BodyLen {
		return fmt.Errorf("%w: %s body is %d bytes, want %d", ErrLength, msg, len(body), BodyLen)
	}
	return nil
}

// fields collects the first out-of-range field of a message being
// encoded or decoded. Offsets are given relative to the body and reported
// relative to the MAD.
type fields struct {
	msg string
	err error
}

// fit records an error if v does not fit in bits bits.
func (f *fields) fit(name string, off int, v uint64, bits uint) {
	if f.err == nil && v>>bits != 0 {
		f.err = &FieldError{Msg: f.msg, Field: name, Offset: HeaderLen + off, Value: v, Reason: fmt.Sprintf("does not fit in %d bits", bits)}
	}
}

// max records an error if v exceeds limit.
func (f *fields) max(name string, off int, v, limit uint64, what string) {
	if f.err == nil && v > limit {
		f.err = &FieldError{Msg: f.msg, Field: name, Offset: HeaderLen + off, Value: v, Reason: fmt.Sprintf("exceeds %d, the size of %s", limit, what)}
	}
}

// notReserved records an error if v is the reserved value r.
func (f *fields) notReserved(name string, off int, v, r uint64) {
	if f.err == nil && v == r {
		f.err = &FieldError{Msg: f.msg, Field: name, Offset: HeaderLen + off, Value: v, Reason: "is reserved"}
	}
}

func be16(b []byte, off int) uint16 { return binary.BigEndian.Uint16(b[off:]) }
func be32(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }
func be64(b []byte, off int) uint64 { return binary.BigEndian.Uint64(b[off:]) }

// be24 reads the 24-bit field in the top three bytes of the word at off.
func be24(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) >> 8 }

func put16(b []byte, off int, v uint16) { binary.BigEndian.PutUint16(b[off:], v) }
func put32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
func put64(b []byte, off int, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }

// put24 writes the low 24 bits of v to b[off:off+3].
func put24(b []byte, off int, v uint32) {
	b[off], b[off+1], b[off+2] = byte(v>>16), byte(v>>8), byte(v)
}

func bit(v bool, shift uint) uint8 {
	if v {
		return 1 << shift
	}
	return 0
}
