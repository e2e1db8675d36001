package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Errors returned by Parse. Each is wrapped with the details of the packet
// at hand; test for them with errors.Is.
var (
	// ErrTruncated means the packet is shorter than its opcode's headers
	// plus pad and ICRC.
	ErrTruncated = errors.New("rxe/wire: truncated packet")
	// ErrOpCode means the opcode is not one of RC, UC, UD, XRC or CNP.
	ErrOpCode = errors.New("rxe/wire: invalid opcode")
	// ErrTVer means the BTH transport version is not 0.
	ErrTVer = errors.New("rxe/wire: unsupported transport version")
	// ErrPadCount means the pad count does not fit the packet: pad on an
	// opcode without payload, or more pad than payload.
	ErrPadCount = errors.New("rxe/wire: bad pad count")
	// ErrLength means the packet length is inconsistent with its opcode:
	// payload on an opcode that carries none, a padded payload that is not
	// a multiple of four bytes, or an ATOMIC_WRITE whose payload is not 8
	// bytes.
	ErrLength = errors.New("rxe/wire: bad packet length")
)

// Packet is a parsed RoCEv2 packet: views of the headers its opcode carries
// (nil for absent ones) and of its payload, all aliasing the parsed bytes.
type Packet struct {
	BTH          BTH
	DETH         DETH
	XRCETH       XRCETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	ImmDt        ImmDt
	IETH         IETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	// Payload is the message data the packet carries, without pad.
	Payload []byte
	// ICRC is the invariant CRC found in the packet's last four bytes.
	ICRC uint32
	// Raw is the whole packet, BTH to ICRC.
	Raw []byte
}

// OpCode returns the packet's opcode.
func (p *Packet) OpCode() OpCode { return p.BTH.OpCode() }

// Parse parses b, a RoCEv2 packet from the BTH to the ICRC (the payload of a
// UDP datagram to port 4791). See Packet.Decode.
func Parse(b []byte) (Packet, error) {
	var p Packet
	err := p.Decode(b)
	return p, err
}

// Decode parses b into p. It checks, once, everything the accessors of the
// header views rely on: the opcode is valid, the transport version is 0, b
// holds the opcode's headers, the pad and the ICRC, and the pad count and
// payload length are consistent with the opcode. It neither allocates nor
// panics, whatever b holds. It does not check the ICRC, which covers the IP
// and UDP headers too: see CheckICRC.
func (p *Packet) Decode(b []byte) error {
	*p = Packet{}
	if len(b) < BTHLen {
		return fmt.Errorf("%w: %d bytes, BTH needs %d", ErrTruncated, len(b), BTHLen)
	}
	bth := BTH(b[:BTHLen])
	op := bth.OpCode()
	info := &opTable[op]
	if info.flags&valid == 0 {
		return fmt.Errorf("%w: 0x%02x", ErrOpCode, uint8(op))
	}
	if v := bth.TVer(); v != 0 {
		return fmt.Errorf("%w: %d", ErrTVer, v)
	}
	hdr := int(info.hdrLen)
	pad := bth.PadCount()
	if len(b) < hdr+ICRCLen {
		return fmt.Errorf("%w: %s needs %d bytes of headers and ICRC, have %d", ErrTruncated, op, hdr+ICRCLen, len(b))
	}
	body := len(b) - hdr - ICRCLen // payload plus pad
	switch {
	case info.flags&hasPayload == 0 && body != 0:
		return fmt.Errorf("%w: %s carries no payload, have %d bytes", ErrLength, op, body)
	case info.flags&hasPayload == 0 && pad != 0:
		return fmt.Errorf("%w: %d on %s, which carries no payload", ErrPadCount, pad, op)
	case body%4 != 0:
		return fmt.Errorf("%w: %s payload plus pad is %d bytes, not a multiple of 4", ErrLength, op, body)
	case pad > body:
		return fmt.Errorf("%w: %d with %d bytes of payload", ErrPadCount, pad, body)
	case info.flags&isAtomicWrite != 0 && body-pad != 8:
		return fmt.Errorf("%w: %s payload is %d bytes, must be 8", ErrLength, op, body-pad)
	}
	p.BTH = bth
	off := BTHLen
	f := info.flags
	next := func(flag opFlags, n int) []byte {
		if f&flag == 0 {
			return nil
		}
		h := b[off : off+n : off+n]
		off += n
		return h
	}
	p.DETH = next(hasDETH, DETHLen)
	p.XRCETH = next(hasXRCETH, XRCETHLen)
	p.FETH = next(hasFETH, FETHLen)
	p.RETH = next(hasRETH, RETHLen)
	p.AtomicETH = next(hasAtomicETH, AtomicETHLen)
	p.ImmDt = next(hasImmDt, ImmDtLen)
	p.IETH = next(hasIETH, IETHLen)
	p.AETH = next(hasAETH, AETHLen)
	p.AtomicAckETH = next(hasAtomicAckETH, AtomicAckETHLen)
	if f&hasCNPPad != 0 {
		off += CNPPadLen
	}
	p.Payload = b[off : off+body-pad : off+body-pad]
	p.ICRC = binary.LittleEndian.Uint32(b[len(b)-ICRCLen:])
	p.Raw = b
	return nil
}

// Headers holds the fields of every header a packet may carry; AppendPacket
// writes those its opcode calls for and ignores the rest.
type Headers struct {
	BTH       BTHFields
	DETH      DETHFields
	XRCSRQN   uint32 // XRCETH: the XRC SRQ number (24 bits)
	FETHSel   uint8  // FETH selectivity level
	FETHPlt   uint8  // FETH placement type
	RETH      RETHFields
	AtomicETH AtomicETHFields
	Imm       uint32 // ImmDt
	IETHRKey  uint32 // IETH: the R_Key to invalidate
	Syndrome  Syndrome
	MSN       uint32
	OrigData  uint64 // AtomicAckETH
}

// Headers returns the fields of every header p carries, such that
// AppendPacket(nil, &h, p.Payload) rebuilds p's bytes but for the ICRC.
func (p *Packet) Headers() Headers {
	h := Headers{BTH: p.BTH.Fields()}
	if p.DETH != nil {
		h.DETH = DETHFields{QKey: p.DETH.QKey(), SrcQP: p.DETH.SrcQP()}
	}
	if p.XRCETH != nil {
		h.XRCSRQN = p.XRCETH.SRQN()
	}
	if p.FETH != nil {
		h.FETHSel, h.FETHPlt = p.FETH.SelectivityLevel(), p.FETH.PlacementType()
	}
	if p.RETH != nil {
		h.RETH = RETHFields{VA: p.RETH.VA(), RKey: p.RETH.RKey(), DMALen: p.RETH.DMALen()}
	}
	if a := p.AtomicETH; a != nil {
		h.AtomicETH = AtomicETHFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
	}
	if p.ImmDt != nil {
		h.Imm = p.ImmDt.Imm()
	}
	if p.IETH != nil {
		h.IETHRKey = p.IETH.RKey()
	}
	if p.AETH != nil {
		h.Syndrome, h.MSN = p.AETH.Syndrome(), p.AETH.MSN()
	}
	if p.AtomicAckETH != nil {
		h.OrigData = p.AtomicAckETH.OrigData()
	}
	return h
}

// PacketLen returns the length of an op packet with n bytes of payload:
// headers, payload, pad and ICRC.
func PacketLen(op OpCode, n int) int {
	return op.HeaderLen() + n + padFor(n) + ICRCLen
}

func padFor(n int) int { return -n & 3 }

// AppendPacket appends to b a packet with the headers h calls for and
// payload, padded to a multiple of four bytes, followed by a zero ICRC to be
// filled in by SetICRC. It sets the BTH pad count from len(payload) and
// ignores h.BTH.PadCount. It fails if the opcode is invalid or carries no
// payload and payload is not empty.
func AppendPacket(b []byte, h *Headers, payload []byte) ([]byte, error) {
	b, room, err := AppendHeaders(b, h, len(payload))
	if err == nil {
		copy(room, payload)
	}
	return b, err
}

// AppendHeaders is AppendPacket for a sender that writes the payload
// itself, straight from where it lives: it appends the headers, n bytes of
// room for the payload, the pad and a zero ICRC, and returns the packet
// and the room (which it leaves as it finds it).
func AppendHeaders(b []byte, h *Headers, n int) (pkt, payload []byte, err error) {
	op := h.BTH.OpCode
	info := &opTable[op]
	if info.flags&valid == 0 {
		return b, nil, fmt.Errorf("%w: 0x%02x", ErrOpCode, uint8(op))
	}
	if info.flags&hasPayload == 0 && n != 0 {
		return b, nil, fmt.Errorf("%w: %s carries no payload, given %d bytes", ErrLength, op, n)
	}
	if info.flags&isAtomicWrite != 0 && n != 8 {
		return b, nil, fmt.Errorf("%w: %s payload must be 8 bytes, given %d", ErrLength, op, n)
	}
	pad := padFor(n)
	start := len(b)
	b = grow(b, int(info.hdrLen)+n+pad+ICRCLen)
	pkt = b[start:]
	bth := BTH(pkt)
	bth.Encode(&h.BTH)
	bth.SetPadCount(pad)
	off := BTHLen
	f := info.flags
	if f&hasDETH != 0 {
		DETH(pkt[off:]).Encode(&h.DETH)
		off += DETHLen
	}
	if f&hasXRCETH != 0 {
		XRCETH(pkt[off:]).SetSRQN(h.XRCSRQN)
		off += XRCETHLen
	}
	if f&hasFETH != 0 {
		FETH(pkt[off:]).Set(h.FETHSel, h.FETHPlt)
		off += FETHLen
	}
	if f&hasRETH != 0 {
		RETH(pkt[off:]).Encode(&h.RETH)
		off += RETHLen
	}
	if f&hasAtomicETH != 0 {
		AtomicETH(pkt[off:]).Encode(&h.AtomicETH)
		off += AtomicETHLen
	}
	if f&hasImmDt != 0 {
		ImmDt(pkt[off:]).SetImm(h.Imm)
		off += ImmDtLen
	}
	if f&hasIETH != 0 {
		IETH(pkt[off:]).SetRKey(h.IETHRKey)
		off += IETHLen
	}
	if f&hasAETH != 0 {
		AETH(pkt[off:]).Encode(h.Syndrome, h.MSN)
		off += AETHLen
	}
	if f&hasAtomicAckETH != 0 {
		AtomicAckETH(pkt[off:]).SetOrigData(h.OrigData)
		off += AtomicAckETHLen
	}
	if f&hasCNPPad != 0 {
		clear(pkt[off : off+CNPPadLen])
		off += CNPPadLen
	}
	payload = pkt[off : off+n : off+n]
	clear(pkt[off+n:]) // pad and ICRC
	return b, payload, nil
}

// grow extends b by n bytes, reallocating only when its capacity is short.
func grow(b []byte, n int) []byte {
	if len(b)+n <= cap(b) {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*len(b)+n)
	copy(nb, b)
	return nb
}

// String summarises the packet on one line: opcode, destination QP, PSN,
// BTH flags, every extended header's fields and the payload length, as
// rdmago dump prints it.
func (p *Packet) String() string { return string(p.AppendSummary(nil)) }

// AppendSummary appends the one-line summary of String to b.
func (p *Packet) AppendSummary(b []byte) []byte {
	bth := p.BTH
	b = append(b, bth.OpCode().String()...)
	b = append(b, " qp=0x"...)
	b = appendHex(b, uint64(bth.DestQP()), 6)
	b = append(b, " psn=0x"...)
	b = appendHex(b, uint64(bth.PSN()), 6)
	if bth.AckReq() {
		b = append(b, " ackreq"...)
	}
	if bth.SolicitedEvent() {
		b = append(b, " se"...)
	}
	if bth.MigReq() {
		b = append(b, " migreq"...)
	}
	if bth.FECN() {
		b = append(b, " fecn"...)
	}
	if bth.BECN() {
		b = append(b, " becn"...)
	}
	if k := bth.PKey(); k != DefaultPKey {
		b = append(b, " pkey=0x"...)
		b = appendHex(b, uint64(k), 4)
	}
	if h := p.DETH; h != nil {
		b = append(b, " qkey=0x"...)
		b = appendHex(b, uint64(h.QKey()), 8)
		b = append(b, " srcqp=0x"...)
		b = appendHex(b, uint64(h.SrcQP()), 6)
	}
	if h := p.XRCETH; h != nil {
		b = append(b, " srqn=0x"...)
		b = appendHex(b, uint64(h.SRQN()), 6)
	}
	if h := p.FETH; h != nil {
		b = append(b, " sel="...)
		b = strconv.AppendUint(b, uint64(h.SelectivityLevel()), 10)
		b = append(b, " plt="...)
		b = strconv.AppendUint(b, uint64(h.PlacementType()), 10)
	}
	if h := p.RETH; h != nil {
		b = append(b, " va=0x"...)
		b = appendHex(b, h.VA(), 0)
		b = append(b, " rkey=0x"...)
		b = appendHex(b, uint64(h.RKey()), 8)
		b = append(b, " dmalen="...)
		b = strconv.AppendUint(b, uint64(h.DMALen()), 10)
	}
	if h := p.AtomicETH; h != nil {
		b = append(b, " va=0x"...)
		b = appendHex(b, h.VA(), 0)
		b = append(b, " rkey=0x"...)
		b = appendHex(b, uint64(h.RKey()), 8)
		if op := bth.OpCode(); op == RCCompareSwap || op == XRCCompareSwap {
			b = append(b, " swap=0x"...)
			b = appendHex(b, h.SwapAdd(), 0)
			b = append(b, " compare=0x"...)
			b = appendHex(b, h.Compare(), 0)
		} else {
			b = append(b, " add=0x"...)
			b = appendHex(b, h.SwapAdd(), 0)
		}
	}
	if h := p.ImmDt; h != nil {
		b = append(b, " imm=0x"...)
		b = appendHex(b, uint64(h.Imm()), 8)
	}
	if h := p.IETH; h != nil {
		b = append(b, " inv_rkey=0x"...)
		b = appendHex(b, uint64(h.RKey()), 8)
	}
	if h := p.AETH; h != nil {
		b = append(b, ' ')
		b = append(b, h.Syndrome().String()...)
		b = append(b, " msn=0x"...)
		b = appendHex(b, uint64(h.MSN()), 6)
	}
	if h := p.AtomicAckETH; h != nil {
		b = append(b, " orig=0x"...)
		b = appendHex(b, h.OrigData(), 0)
	}
	b = append(b, " len="...)
	b = strconv.AppendInt(b, int64(len(p.Payload)), 10)
	return b
}

// appendHex appends v in lower-case hex, zero-padded to at least width digits.
func appendHex(b []byte, v uint64, width int) []byte {
	var buf [16]byte
	s := strconv.AppendUint(buf[:0], v, 16)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

func itoa(n int) string { return strconv.Itoa(n) }

func hex(v uint64) string { return strconv.FormatUint(v, 16) }
