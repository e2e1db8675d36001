package wire

import "strconv"

// OpCode is the BTH opcode (IBTA vol. 1 §9.2.1, table 38). Its top three bits
// name the transport service and its low five bits the operation.
type OpCode uint8

// Transport is the transport-service part of an opcode (its top three bits).
type Transport uint8

// Transport services (IBTA vol. 1 table 38).
const (
	TransportRC  Transport = 0x00 // Reliable Connection
	TransportUC  Transport = 0x20 // Unreliable Connection
	TransportRD  Transport = 0x40 // Reliable Datagram (not supported by RoCE devices)
	TransportUD  Transport = 0x60 // Unreliable Datagram
	TransportCNP Transport = 0x80 // Congestion Notification Packet (RoCEv2 Annex A17)
	TransportXRC Transport = 0xa0 // Extended Reliable Connection
)

// String returns the short name of the transport ("RC", "UD", ...).
func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	case TransportXRC:
		return "XRC"
	}
	return "transport(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

// Opcodes of the RC, UC and UD transports and the RoCEv2 CNP, numbered as in
// IBTA vol. 1 table 38 (and Linux's IB_OPCODE_* names).
const (
	RCSendFirst              OpCode = 0x00
	RCSendMiddle             OpCode = 0x01
	RCSendLast               OpCode = 0x02
	RCSendLastWithImmediate  OpCode = 0x03
	RCSendOnly               OpCode = 0x04
	RCSendOnlyWithImmediate  OpCode = 0x05
	RCWriteFirst             OpCode = 0x06
	RCWriteMiddle            OpCode = 0x07
	RCWriteLast              OpCode = 0x08
	RCWriteLastWithImmediate OpCode = 0x09
	RCWriteOnly              OpCode = 0x0a
	RCWriteOnlyWithImmediate OpCode = 0x0b
	RCReadRequest            OpCode = 0x0c
	RCReadResponseFirst      OpCode = 0x0d
	RCReadResponseMiddle     OpCode = 0x0e
	RCReadResponseLast       OpCode = 0x0f
	RCReadResponseOnly       OpCode = 0x10
	RCAcknowledge            OpCode = 0x11
	RCAtomicAcknowledge      OpCode = 0x12
	RCCompareSwap            OpCode = 0x13
	RCFetchAdd               OpCode = 0x14
	RCSendLastWithInvalidate OpCode = 0x16
	RCSendOnlyWithInvalidate OpCode = 0x17
	RCFlush                  OpCode = 0x1c
	RCAtomicWrite            OpCode = 0x1d
	UCSendFirst              OpCode = 0x20
	UCSendMiddle             OpCode = 0x21
	UCSendLast               OpCode = 0x22
	UCSendLastWithImmediate  OpCode = 0x23
	UCSendOnly               OpCode = 0x24
	UCSendOnlyWithImmediate  OpCode = 0x25
	UCWriteFirst             OpCode = 0x26
	UCWriteMiddle            OpCode = 0x27
	UCWriteLast              OpCode = 0x28
	UCWriteLastWithImmediate OpCode = 0x29
	UCWriteOnly              OpCode = 0x2a
	UCWriteOnlyWithImmediate OpCode = 0x2b
	UDSendOnly               OpCode = 0x64
	UDSendOnlyWithImmediate  OpCode = 0x65
	CNP                      OpCode = 0x81
)

// Opcodes of the XRC transport (IBTA vol. 1 table 38): RC's operations
// under the transport prefix 0xA0. Requests carry an XRCETH right after
// the BTH; responses (READ responses, ACKNOWLEDGE, ATOMIC ACKNOWLEDGE) are
// laid out as RC's. FLUSH and ATOMIC WRITE are RC's only here.
const (
	XRCSendFirst              OpCode = 0xa0
	XRCSendMiddle             OpCode = 0xa1
	XRCSendLast               OpCode = 0xa2
	XRCSendLastWithImmediate  OpCode = 0xa3
	XRCSendOnly               OpCode = 0xa4
	XRCSendOnlyWithImmediate  OpCode = 0xa5
	XRCWriteFirst             OpCode = 0xa6
	XRCWriteMiddle            OpCode = 0xa7
	XRCWriteLast              OpCode = 0xa8
	XRCWriteLastWithImmediate OpCode = 0xa9
	XRCWriteOnly              OpCode = 0xaa
	XRCWriteOnlyWithImmediate OpCode = 0xab
	XRCReadRequest            OpCode = 0xac
	XRCReadResponseFirst      OpCode = 0xad
	XRCReadResponseMiddle     OpCode = 0xae
	XRCReadResponseLast       OpCode = 0xaf
	XRCReadResponseOnly       OpCode = 0xb0
	XRCAcknowledge            OpCode = 0xb1
	XRCAtomicAcknowledge      OpCode = 0xb2
	XRCCompareSwap            OpCode = 0xb3
	XRCFetchAdd               OpCode = 0xb4
	XRCSendLastWithInvalidate OpCode = 0xb6
	XRCSendOnlyWithInvalidate OpCode = 0xb7
)

// Extended-header and shape bits of an opcode.
type opFlags uint32

const (
	hasDETH opFlags = 1 << iota
	hasXRCETH
	hasFETH
	hasRETH
	hasAtomicETH
	hasImmDt
	hasIETH
	hasAETH
	hasAtomicAckETH
	hasCNPPad
	hasPayload
	isFirst
	isMiddle
	isLast
	isSend
	isWrite
	isReadReq
	isReadResp
	isAck
	isAtomic
	isFlush
	isAtomicWrite
	valid

	isOnly = isFirst | isLast
)

// Extended header lengths in bytes (IBTA vol. 1 §9.3).
const (
	BTHLen          = 12
	DETHLen         = 8
	XRCETHLen       = 4
	FETHLen         = 4
	RETHLen         = 16
	AtomicETHLen    = 28
	ImmDtLen        = 4
	IETHLen         = 4
	AETHLen         = 4
	AtomicAckETHLen = 8
	CNPPadLen       = 16 // reserved bytes following the BTH of a CNP
	ICRCLen         = 4
)

// headerLen gives, for each header flag, its length.
var headerOrder = [...]struct {
	flag opFlags
	n    int
}{
	{hasDETH, DETHLen},
	{hasXRCETH, XRCETHLen},
	{hasFETH, FETHLen},
	{hasRETH, RETHLen},
	{hasAtomicETH, AtomicETHLen},
	{hasImmDt, ImmDtLen},
	{hasIETH, IETHLen},
	{hasAETH, AETHLen},
	{hasAtomicAckETH, AtomicAckETHLen},
	{hasCNPPad, CNPPadLen},
}

type opInfo struct {
	flags  opFlags
	hdrLen uint8 // BTH plus extended headers
	name   string
}

var opTable [256]opInfo

func init() {
	// Operations shared by RC and UC, relative to the transport base.
	send := []struct {
		op    uint8
		flags opFlags
		name  string
	}{
		{0x00, isSend | isFirst | hasPayload, "SEND_FIRST"},
		{0x01, isSend | isMiddle | hasPayload, "SEND_MIDDLE"},
		{0x02, isSend | isLast | hasPayload, "SEND_LAST"},
		{0x03, isSend | isLast | hasPayload | hasImmDt, "SEND_LAST_WITH_IMMEDIATE"},
		{0x04, isSend | isOnly | hasPayload, "SEND_ONLY"},
		{0x05, isSend | isOnly | hasPayload | hasImmDt, "SEND_ONLY_WITH_IMMEDIATE"},
		{0x06, isWrite | isFirst | hasPayload | hasRETH, "RDMA_WRITE_FIRST"},
		{0x07, isWrite | isMiddle | hasPayload, "RDMA_WRITE_MIDDLE"},
		{0x08, isWrite | isLast | hasPayload, "RDMA_WRITE_LAST"},
		{0x09, isWrite | isLast | hasPayload | hasImmDt, "RDMA_WRITE_LAST_WITH_IMMEDIATE"},
		{0x0a, isWrite | isOnly | hasPayload | hasRETH, "RDMA_WRITE_ONLY"},
		{0x0b, isWrite | isOnly | hasPayload | hasRETH | hasImmDt, "RDMA_WRITE_ONLY_WITH_IMMEDIATE"},
	}
	rcOnly := []struct {
		op    uint8
		flags opFlags
		name  string
	}{
		{0x0c, isReadReq | isOnly | hasRETH, "RDMA_READ_REQUEST"},
		{0x0d, isReadResp | isFirst | hasPayload | hasAETH, "RDMA_READ_RESPONSE_FIRST"},
		{0x0e, isReadResp | isMiddle | hasPayload, "RDMA_READ_RESPONSE_MIDDLE"},
		{0x0f, isReadResp | isLast | hasPayload | hasAETH, "RDMA_READ_RESPONSE_LAST"},
		{0x10, isReadResp | isOnly | hasPayload | hasAETH, "RDMA_READ_RESPONSE_ONLY"},
		{0x11, isAck | isOnly | hasAETH, "ACKNOWLEDGE"},
		{0x12, isAck | isAtomic | isOnly | hasAETH | hasAtomicAckETH, "ATOMIC_ACKNOWLEDGE"},
		{0x13, isAtomic | isOnly | hasAtomicETH, "COMPARE_SWAP"},
		{0x14, isAtomic | isOnly | hasAtomicETH, "FETCH_ADD"},
		{0x16, isSend | isLast | hasPayload | hasIETH, "SEND_LAST_WITH_INVALIDATE"},
		{0x17, isSend | isOnly | hasPayload | hasIETH, "SEND_ONLY_WITH_INVALIDATE"},
		{0x1c, isFlush | isOnly | hasFETH | hasRETH, "FLUSH"},
		{0x1d, isAtomicWrite | isOnly | hasPayload | hasRETH, "ATOMIC_WRITE"},
	}
	for _, e := range send {
		define(OpCode(TransportRC)|OpCode(e.op), e.flags, "RC_"+e.name)
		define(OpCode(TransportUC)|OpCode(e.op), e.flags, "UC_"+e.name)
	}
	for _, e := range rcOnly {
		define(OpCode(TransportRC)|OpCode(e.op), e.flags, "RC_"+e.name)
	}
	// XRC mirrors RC but for FLUSH and ATOMIC WRITE; its requests carry
	// the XRCETH.
	for _, e := range append(send, rcOnly...) {
		if e.flags&(isFlush|isAtomicWrite) != 0 {
			continue
		}
		f := e.flags
		if f&(isAck|isReadResp) == 0 {
			f |= hasXRCETH
		}
		define(OpCode(TransportXRC)|OpCode(e.op), f, "XRC_"+e.name)
	}
	define(UDSendOnly, isSend|isOnly|hasPayload|hasDETH, "UD_SEND_ONLY")
	define(UDSendOnlyWithImmediate, isSend|isOnly|hasPayload|hasDETH|hasImmDt, "UD_SEND_ONLY_WITH_IMMEDIATE")
	define(CNP, isOnly|hasCNPPad, "CNP")
}

func define(op OpCode, f opFlags, name string) {
	n := BTHLen
	for _, h := range headerOrder {
		if f&h.flag != 0 {
			n += h.n
		}
	}
	opTable[op] = opInfo{flags: f | valid, hdrLen: uint8(n), name: name}
}

func (op OpCode) has(f opFlags) bool { return opTable[op].flags&f != 0 }

// Valid reports whether op is an opcode of the RC, UC, UD or XRC transport
// or the RoCEv2 CNP. RD opcodes are not valid here.
func (op OpCode) Valid() bool { return op.has(valid) }

// Transport returns the transport service of op.
func (op OpCode) Transport() Transport { return Transport(op & 0xe0) }

// HeaderLen returns the length of the BTH and the extended headers that an
// op packet carries, or 0 if op is not valid.
func (op OpCode) HeaderLen() int { return int(opTable[op].hdrLen) }

// HasDETH reports whether op packets carry a Datagram Extended Transport Header.
func (op OpCode) HasDETH() bool { return op.has(hasDETH) }

// HasXRCETH reports whether op packets carry an XRC Extended Transport
// Header (every XRC request does).
func (op OpCode) HasXRCETH() bool { return op.has(hasXRCETH) }

// HasFETH reports whether op packets carry a Flush Extended Transport Header.
func (op OpCode) HasFETH() bool { return op.has(hasFETH) }

// HasRETH reports whether op packets carry an RDMA Extended Transport Header.
func (op OpCode) HasRETH() bool { return op.has(hasRETH) }

// HasAtomicETH reports whether op packets carry an Atomic Extended Transport Header.
func (op OpCode) HasAtomicETH() bool { return op.has(hasAtomicETH) }

// HasImmDt reports whether op packets carry Immediate Data.
func (op OpCode) HasImmDt() bool { return op.has(hasImmDt) }

// HasIETH reports whether op packets carry an Invalidate Extended Transport Header.
func (op OpCode) HasIETH() bool { return op.has(hasIETH) }

// HasAETH reports whether op packets carry an ACK Extended Transport Header.
func (op OpCode) HasAETH() bool { return op.has(hasAETH) }

// HasAtomicAckETH reports whether op packets carry an Atomic ACK Extended Transport Header.
func (op OpCode) HasAtomicAckETH() bool { return op.has(hasAtomicAckETH) }

// HasPayload reports whether op packets may carry a payload.
func (op OpCode) HasPayload() bool { return op.has(hasPayload) }

// IsFirst reports whether op is the first packet of a multi-packet message
// or an only packet.
func (op OpCode) IsFirst() bool { return op.has(isFirst) }

// IsMiddle reports whether op is a middle packet of a multi-packet message.
func (op OpCode) IsMiddle() bool { return op.has(isMiddle) }

// IsLast reports whether op is the last packet of a multi-packet message or
// an only packet.
func (op OpCode) IsLast() bool { return op.has(isLast) }

// IsOnly reports whether op is a single-packet message.
func (op OpCode) IsOnly() bool { return opTable[op].flags&isOnly == isOnly }

// IsSend reports whether op is part of a SEND message.
func (op OpCode) IsSend() bool { return op.has(isSend) }

// IsWrite reports whether op is part of an RDMA WRITE message.
func (op OpCode) IsWrite() bool { return op.has(isWrite) }

// IsReadRequest reports whether op is an RDMA READ request.
func (op OpCode) IsReadRequest() bool { return op.has(isReadReq) }

// IsReadResponse reports whether op is part of an RDMA READ response.
func (op OpCode) IsReadResponse() bool { return op.has(isReadResp) }

// IsAck reports whether op is an ACKNOWLEDGE or ATOMIC ACKNOWLEDGE.
func (op OpCode) IsAck() bool { return op.has(isAck) }

// IsAtomic reports whether op is an atomic request (COMPARE_SWAP, FETCH_ADD)
// or an ATOMIC ACKNOWLEDGE.
func (op OpCode) IsAtomic() bool { return op.has(isAtomic) }

// IsRequest reports whether op is sent by a requester (as opposed to an
// acknowledgement or read response sent by a responder).
func (op OpCode) IsRequest() bool {
	return op.Valid() && !op.has(isAck|isReadResp) && op != CNP
}

// IsResponse reports whether op is sent by a responder: an acknowledgement
// or a read response.
func (op OpCode) IsResponse() bool { return op.has(isAck | isReadResp) }

// String returns the opcode's name as Linux spells it without the
// IB_OPCODE_ prefix ("RC_SEND_ONLY"), or "OPCODE(0xNN)".
func (op OpCode) String() string {
	if n := opTable[op].name; n != "" {
		return n
	}
	return "OPCODE(0x" + strconv.FormatUint(uint64(op), 16) + ")"
}
