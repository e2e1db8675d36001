package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// sampleHeaders returns headers with every field set to a distinct value.
func sampleHeaders(op OpCode) *Headers {
	return &Headers{
		BTH: BTHFields{OpCode: op, SolicitedEvent: true, MigReq: true, PKey: 0xffff,
			FECN: true, BECN: false, DestQP: 0x123456, AckReq: true, PSN: 0xabcdef},
		DETH:      DETHFields{QKey: 0x11111111, SrcQP: 0x000011},
		XRCSRQN:   0x00c0de,
		FETHSel:   1,
		FETHPlt:   2,
		RETH:      RETHFields{VA: 0x0000557a_1b2c3d40, RKey: 0xdeadbeef, DMALen: 2048},
		AtomicETH: AtomicETHFields{VA: 0x1000, RKey: 0x77, SwapAdd: 0x0102030405060708, Compare: 0x1112131415161718},
		Imm:       0x1000,
		IETHRKey:  0xcafef00d,
		Syndrome:  NAKRemoteAccessError,
		MSN:       0x000042,
		OrigData:  0x2122232425262728,
	}
}

func samplePayload(op OpCode, n int) []byte {
	if !op.HasPayload() {
		return nil
	}
	if op == RCAtomicWrite {
		n = 8
	}
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + 1)
	}
	return p
}

func validOpCodes() []OpCode {
	var ops []OpCode
	for i := 0; i < 256; i++ {
		if OpCode(i).Valid() {
			ops = append(ops, OpCode(i))
		}
	}
	return ops
}

func TestAppendPacketRoundTripsEveryOpCode(t *testing.T) {
	for _, op := range validOpCodes() {
		for _, n := range []int{0, 1, 2, 3, 4, 5, 1023, 1024} {
			h := sampleHeaders(op)
			payload := samplePayload(op, n)
			prefix := []byte("prefix")
			b, err := AppendPacket(prefix, h, payload)
			if err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			if !bytes.Equal(b[:len(prefix)], prefix) {
				t.Fatalf("%s: prefix overwritten", op)
			}
			pkt := b[len(prefix):]
			if len(pkt) != PacketLen(op, len(payload)) || len(pkt)%4 != 0 {
				t.Fatalf("%s/%d: len %d, PacketLen %d", op, n, len(pkt), PacketLen(op, len(payload)))
			}
			p, err := Parse(pkt)
			if err != nil {
				t.Fatalf("%s/%d: Parse: %v", op, n, err)
			}
			want := h.BTH
			want.PadCount = padFor(len(payload))
			if got := p.BTH.Fields(); got != want {
				t.Errorf("%s: BTH %+v, want %+v", op, got, want)
			}
			if !bytes.Equal(p.Payload, payload) {
				t.Errorf("%s/%d: payload %x, want %x", op, n, p.Payload, payload)
			}
			checkHeader := func(name string, present, want bool) {
				if present != want {
					t.Errorf("%s: %s present=%v, want %v", op, name, present, want)
				}
			}
			checkHeader("DETH", p.DETH != nil, op.HasDETH())
			checkHeader("XRCETH", p.XRCETH != nil, op.HasXRCETH())
			checkHeader("FETH", p.FETH != nil, op.HasFETH())
			checkHeader("RETH", p.RETH != nil, op.HasRETH())
			checkHeader("AtomicETH", p.AtomicETH != nil, op.HasAtomicETH())
			checkHeader("ImmDt", p.ImmDt != nil, op.HasImmDt())
			checkHeader("IETH", p.IETH != nil, op.HasIETH())
			checkHeader("AETH", p.AETH != nil, op.HasAETH())
			checkHeader("AtomicAckETH", p.AtomicAckETH != nil, op.HasAtomicAckETH())
			if p.DETH != nil && (p.DETH.QKey() != h.DETH.QKey || p.DETH.SrcQP() != h.DETH.SrcQP) {
				t.Errorf("%s: DETH %x", op, []byte(p.DETH))
			}
			if p.XRCETH != nil && p.XRCETH.SRQN() != h.XRCSRQN {
				t.Errorf("%s: XRCETH %x", op, []byte(p.XRCETH))
			}
			if p.FETH != nil && (p.FETH.SelectivityLevel() != 1 || p.FETH.PlacementType() != 2) {
				t.Errorf("%s: FETH %x", op, []byte(p.FETH))
			}
			if p.RETH != nil && (RETHFields{p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()}) != h.RETH {
				t.Errorf("%s: RETH %x", op, []byte(p.RETH))
			}
			if a := p.AtomicETH; a != nil && (AtomicETHFields{a.VA(), a.RKey(), a.SwapAdd(), a.Compare()}) != h.AtomicETH {
				t.Errorf("%s: AtomicETH %x", op, []byte(a))
			}
			if p.ImmDt != nil && p.ImmDt.Imm() != h.Imm {
				t.Errorf("%s: ImmDt %x", op, []byte(p.ImmDt))
			}
			if p.IETH != nil && p.IETH.RKey() != h.IETHRKey {
				t.Errorf("%s: IETH %x", op, []byte(p.IETH))
			}
			if p.AETH != nil && (p.AETH.Syndrome() != h.Syndrome || p.AETH.MSN() != h.MSN) {
				t.Errorf("%s: AETH %x", op, []byte(p.AETH))
			}
			if p.AtomicAckETH != nil && p.AtomicAckETH.OrigData() != h.OrigData {
				t.Errorf("%s: AtomicAckETH %x", op, []byte(p.AtomicAckETH))
			}
		}
	}
}

func TestAppendPacketRejectsBadInput(t *testing.T) {
	tests := []struct {
		name    string
		op      OpCode
		payload []byte
		want    error
	}{
		{"invalid opcode", 0x15, nil, ErrOpCode},
		{"RD opcode", 0x44, nil, ErrOpCode},
		{"payload on ACK", RCAcknowledge, []byte{1}, ErrLength},
		{"payload on READ request", RCReadRequest, []byte{1, 2, 3, 4}, ErrLength},
		{"short ATOMIC_WRITE", RCAtomicWrite, []byte{1, 2, 3, 4}, ErrLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := sampleHeaders(tt.op)
			b, err := AppendPacket([]byte{9}, h, tt.payload)
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if len(b) != 1 {
				t.Errorf("buffer grew to %d bytes on error", len(b))
			}
		})
	}
}

func TestParseRejectsTruncation(t *testing.T) {
	for _, op := range validOpCodes() {
		pkt, err := AppendPacket(nil, sampleHeaders(op), samplePayload(op, 8))
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(pkt); n++ {
			if _, err := Parse(pkt[:n]); err == nil {
				// A prefix may still be a valid shorter packet only if
				// the opcode carries payload and the cut removed
				// whole 4-byte words of it.
				if !op.HasPayload() || (len(pkt)-n)%4 != 0 {
					t.Errorf("%s: %d-byte prefix of %d parsed", op, n, len(pkt))
				}
			} else if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrLength) && !errors.Is(err, ErrPadCount) {
				t.Errorf("%s: prefix %d: unexpected error %v", op, n, err)
			}
		}
	}
}

func TestParseRejectsInconsistentPackets(t *testing.T) {
	build := func(op OpCode, n int) []byte {
		b, err := AppendPacket(nil, sampleHeaders(op), samplePayload(op, n))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name   string
		pkt    func() []byte
		want   error
		substr string
	}{
		{"empty", func() []byte { return nil }, ErrTruncated, "BTH needs 12"},
		{"invalid opcode", func() []byte { b := build(RCSendOnly, 4); b[0] = 0x15; return b }, ErrOpCode, "0x15"},
		{"RD opcode", func() []byte { b := build(RCSendOnly, 4); b[0] = 0x44; return b }, ErrOpCode, "0x44"},
		{"XRC FLUSH", func() []byte { b := build(RCFlush, 0); b[0] = 0xbc; return b }, ErrOpCode, "0xbc"},
		{"XRCETH cut short", func() []byte { return build(XRCSendOnly, 0)[:14] }, ErrTruncated, "needs 20"},
		{"transport version 1", func() []byte { b := build(RCSendOnly, 4); b[1] |= 1; return b }, ErrTVer, "1"},
		{"pad on ACK", func() []byte { b := build(RCAcknowledge, 0); BTH(b).SetPadCount(1); return b }, ErrPadCount, "carries no payload"},
		{"more pad than payload", func() []byte { b := build(RCSendOnly, 0); BTH(b).SetPadCount(3); return b }, ErrPadCount, "with 0 bytes"},
		{"payload on READ request", func() []byte { return append(build(RCReadRequest, 0), 0, 0, 0, 0) }, ErrLength, "carries no payload"},
		{"length not multiple of 4", func() []byte { return append(build(RCSendOnly, 4), 0) }, ErrLength, "multiple of 4"},
		{"ATOMIC_WRITE payload 12", func() []byte { return append(build(RCAtomicWrite, 8), 0, 0, 0, 0) }, ErrLength, "must be 8"},
		{"RETH cut short", func() []byte { return build(RCWriteOnly, 0)[:20] }, ErrTruncated, "needs 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.pkt())
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(tt.substr)) {
				t.Errorf("err %q does not say %q", err, tt.substr)
			}
		})
	}
}

func TestParseAndAppendDoNotAllocate(t *testing.T) {
	pkt, _ := AppendPacket(nil, sampleHeaders(RCWriteOnlyWithImmediate), samplePayload(RCWriteOnlyWithImmediate, 1024))
	var p Packet
	if n := testing.AllocsPerRun(100, func() {
		if err := p.Decode(pkt); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Decode allocates %v times", n)
	}
	buf := make([]byte, 0, 2048)
	h := sampleHeaders(RCWriteOnlyWithImmediate)
	payload := samplePayload(RCWriteOnlyWithImmediate, 1024)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := AppendPacket(buf[:0], h, payload); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AppendPacket allocates %v times", n)
	}
	ph := &PseudoHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 49152, DstPort: UDPPort, IPv4Flags: IPv4DontFragment}
	if n := testing.AllocsPerRun(100, func() { ph.SetICRC(pkt) }); n != 0 {
		t.Errorf("SetICRC allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, _, ok := ph.CheckICRCAnyIPv4ID(pkt); !ok {
			t.Fatal("ICRC does not check")
		}
	}); n != 0 {
		t.Errorf("CheckICRCAnyIPv4ID allocates %v times", n)
	}
}

func TestSummaryNamesEveryHeaderField(t *testing.T) {
	tests := []struct {
		op   OpCode
		want string
	}{
		{RCSendOnly, "RC_SEND_ONLY qp=0x123456 psn=0xabcdef ackreq se migreq fecn len=4"},
		{RCWriteFirst, "RC_RDMA_WRITE_FIRST qp=0x123456 psn=0xabcdef ackreq se migreq fecn va=0x557a1b2c3d40 rkey=0xdeadbeef dmalen=2048 len=4"},
		{RCCompareSwap, "RC_COMPARE_SWAP qp=0x123456 psn=0xabcdef ackreq se migreq fecn va=0x1000 rkey=0x00000077 swap=0x102030405060708 compare=0x1112131415161718 len=0"},
		{RCFetchAdd, "RC_FETCH_ADD qp=0x123456 psn=0xabcdef ackreq se migreq fecn va=0x1000 rkey=0x00000077 add=0x102030405060708 len=0"},
		{RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE qp=0x123456 psn=0xabcdef ackreq se migreq fecn NAK REMOTE_ACCESS_ERR msn=0x000042 orig=0x2122232425262728 len=0"},
		{UDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE qp=0x123456 psn=0xabcdef ackreq se migreq fecn qkey=0x11111111 srcqp=0x000011 imm=0x00001000 len=4"},
		{RCSendOnlyWithInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE qp=0x123456 psn=0xabcdef ackreq se migreq fecn inv_rkey=0xcafef00d len=4"},
		{XRCSendOnlyWithImmediate, "XRC_SEND_ONLY_WITH_IMMEDIATE qp=0x123456 psn=0xabcdef ackreq se migreq fecn srqn=0x00c0de imm=0x00001000 len=4"},
		{XRCCompareSwap, "XRC_COMPARE_SWAP qp=0x123456 psn=0xabcdef ackreq se migreq fecn srqn=0x00c0de va=0x1000 rkey=0x00000077 swap=0x102030405060708 compare=0x1112131415161718 len=0"},
		{XRCAcknowledge, "XRC_ACKNOWLEDGE qp=0x123456 psn=0xabcdef ackreq se migreq fecn NAK REMOTE_ACCESS_ERR msn=0x000042 len=0"},
		{RCFlush, "RC_FLUSH qp=0x123456 psn=0xabcdef ackreq se migreq fecn sel=1 plt=2 va=0x557a1b2c3d40 rkey=0xdeadbeef dmalen=2048 len=0"},
	}
	for _, tt := range tests {
		pkt, err := AppendPacket(nil, sampleHeaders(tt.op), samplePayload(tt.op, 4))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(pkt)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.String(); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.op, got, tt.want)
		}
	}
}

// referenceCRC32 is a bit-at-a-time CRC-32 (IEEE, reflected), kept simple
// to check the table-driven one against.
func referenceCRC32(data []byte) uint32 {
	crc := ^uint32(0)
	for _, b := range data {
		crc ^= uint32(b)
		for i := 0; i < 8; i++ {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xedb88320
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

// referenceICRC builds the masked byte string of Annex A17 literally and
// runs the reference CRC over it.
func referenceICRC(ip, udp, roce []byte) uint32 {
	var m []byte
	m = append(m, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	ipm := append([]byte(nil), ip...)
	if ip[0]>>4 == 4 {
		ipm[1], ipm[8], ipm[10], ipm[11] = 0xff, 0xff, 0xff, 0xff
	} else {
		ipm[0] |= 0x0f
		ipm[1], ipm[2], ipm[3], ipm[7] = 0xff, 0xff, 0xff, 0xff
	}
	m = append(m, ipm...)
	udpm := append([]byte(nil), udp...)
	udpm[6], udpm[7] = 0xff, 0xff
	m = append(m, udpm...)
	bth := append([]byte(nil), roce[:BTHLen]...)
	bth[4] = 0xff
	m = append(m, bth...)
	m = append(m, roce[BTHLen:len(roce)-ICRCLen]...)
	return referenceCRC32(m)
}

// buildDatagram wraps roce in IP and UDP headers as Linux would send it.
func buildDatagram(ph *PseudoHeader, roce []byte, tos, ttl uint8) []byte {
	n := len(roce)
	var b []byte
	if ph.Src.Unmap().Is4() {
		ip := make([]byte, IPv4MinLen)
		ip[0], ip[1], ip[8], ip[9] = 0x45, tos, ttl, protoUDP
		ip[2], ip[3] = byte((28+n)>>8), byte(28+n)
		ip[4], ip[5] = byte(ph.IPv4ID>>8), byte(ph.IPv4ID)
		ip[6], ip[7] = byte(ph.IPv4Flags>>8), byte(ph.IPv4Flags)
		ip[10], ip[11] = 0x12, 0x34 // a checksum the ICRC must not see
		s, d := ph.Src.Unmap().As4(), ph.Dst.Unmap().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		b = ip
	} else {
		ip := make([]byte, IPv6Len)
		ip[0], ip[1], ip[2], ip[3] = 0x60|tos>>4, tos<<4|0x0a, 0xbc, 0xde // traffic class and flow label
		ip[4], ip[5], ip[6], ip[7] = byte((8+n)>>8), byte(8+n), protoUDP, ttl
		s, d := ph.Src.As16(), ph.Dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = ip
	}
	udp := []byte{byte(ph.SrcPort >> 8), byte(ph.SrcPort), byte(ph.DstPort >> 8), byte(ph.DstPort),
		byte((8 + n) >> 8), byte(8 + n), 0xab, 0xcd}
	b = append(b, udp...)
	return append(b, roce...)
}

func TestICRCMatchesBitwiseReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	addrs := [][2]string{
		{"10.77.0.12", "10.77.0.11"},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.2"},
		{"fe80::5054:ff:fe77:c", "2001:db8::1"},
	}
	ops := validOpCodes()
	for i := 0; i < 2000; i++ {
		a := addrs[i%len(addrs)]
		ph := &PseudoHeader{
			Src: netip.MustParseAddr(a[0]), Dst: netip.MustParseAddr(a[1]),
			SrcPort: uint16(0xc000 | rng.IntN(0x4000)), DstPort: UDPPort,
			IPv4ID: uint16(rng.Uint32()), IPv4Flags: IPv4DontFragment,
		}
		op := ops[rng.IntN(len(ops))]
		h := sampleHeaders(op)
		h.BTH.PSN = PSN(rng.Uint32() & PSNMask)
		h.BTH.FECN, h.BTH.BECN = rng.IntN(2) == 0, rng.IntN(2) == 0
		align := i % 8 // exercise unaligned buffers
		buf := make([]byte, align, align+4200)
		b, err := AppendPacket(buf, h, samplePayload(op, rng.IntN(4097)))
		if err != nil {
			t.Fatal(err)
		}
		roce := b[align:]
		ph.SetICRC(roce)
		dg := buildDatagram(ph, roce, uint8(rng.Uint32()), uint8(rng.Uint32()))
		d, err := ParseDatagram(dg)
		if err != nil {
			t.Fatal(err)
		}
		want := referenceICRC(d.IP, d.UDP, d.Payload)
		if got := ph.ICRC(roce); got != want {
			t.Fatalf("#%d %s: PseudoHeader.ICRC %#08x, reference %#08x", i, op, got, want)
		}
		if got := d.ICRC(); got != want {
			t.Fatalf("#%d %s: Datagram.ICRC %#08x, reference %#08x", i, op, got, want)
		}
		if !d.CheckICRC() || !ph.CheckICRC(roce) {
			t.Fatalf("#%d: stored ICRC does not check", i)
		}
		if d.PseudoHeader() != (PseudoHeader{Src: d.Src, Dst: d.Dst, SrcPort: ph.SrcPort, DstPort: ph.DstPort, IPv4ID: d.IPv4ID(), IPv4Flags: d.IPv4Flags()}) {
			t.Fatal("PseudoHeader() mismatch")
		}
		// Any flipped bit outside the masked fields breaks it.
		bit := rng.IntN(len(roce) * 8)
		if byteIdx := bit / 8; byteIdx != 4 {
			roce[byteIdx] ^= 1 << (bit % 8)
			if ph.CheckICRC(roce) {
				t.Fatalf("#%d: ICRC still checks after flipping bit %d", i, bit)
			}
			roce[byteIdx] ^= 1 << (bit % 8)
		}
		// BTH byte 4 is masked: FECN/BECN may change in flight.
		roce[4] ^= 0xc0
		if !ph.CheckICRC(roce) {
			t.Fatalf("#%d: FECN/BECN change broke the ICRC", i)
		}
	}
}

func TestCheckICRCAnyIPv4IDRecoversIDAndDF(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 500; i++ {
		op := []OpCode{RCSendOnly, RCAcknowledge, RCWriteFirst, UDSendOnly}[i%4]
		pkt, _ := AppendPacket(nil, sampleHeaders(op), samplePayload(op, rng.IntN(5000)))
		sent := &PseudoHeader{
			Src: netip.MustParseAddr("10.77.0.12"), Dst: netip.MustParseAddr("::ffff:10.77.0.11"),
			SrcPort: 0xc123, DstPort: UDPPort, IPv4ID: uint16(rng.Uint32()),
		}
		if rng.IntN(2) == 0 {
			sent.IPv4Flags = IPv4DontFragment
		}
		sent.SetICRC(pkt)
		seen := *sent
		seen.IPv4ID, seen.IPv4Flags = 0xffff, 0 // what a receiver does not know is ignored
		id, flags, ok := seen.CheckICRCAnyIPv4ID(pkt)
		if !ok || id != sent.IPv4ID || flags != sent.IPv4Flags {
			t.Fatalf("#%d: got id %#x flags %#x ok %v, sent id %#x flags %#x", i, id, flags, ok, sent.IPv4ID, sent.IPv4Flags)
		}
		pkt[len(pkt)-5] ^= 0x10
		if _, _, ok := seen.CheckICRCAnyIPv4ID(pkt); ok && i < 100 {
			// 2^-15 chance per packet; the seeds here are fixed.
			t.Fatalf("#%d: corrupted packet accepted", i)
		}
	}
	// IPv6 has no unknown fields.
	pkt, _ := AppendPacket(nil, sampleHeaders(RCSendOnly), []byte("data"))
	ph := &PseudoHeader{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), SrcPort: 1, DstPort: UDPPort}
	ph.SetICRC(pkt)
	if _, _, ok := ph.CheckICRCAnyIPv4ID(pkt); !ok {
		t.Fatal("IPv6 packet rejected")
	}
}

// xPow8 holds x^(8·2^k) modulo the polynomial: the effect on the CRC state
// of 2^k zero bytes.
var xPow8 = func() (t [64]uint32) {
	t[0] = crcOne >> 8 // x^8
	for k := 1; k < len(t); k++ {
		t[k] = mulModP(t[k-1], t[k-1])
	}
	return t
}()

// xPow8n returns x^(8n) modulo the polynomial.
func xPow8n(n uint64) uint32 {
	r := uint32(crcOne)
	for k := 0; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			r = mulModP(r, xPow8[k])
		}
	}
	return r
}

func TestCRCPolynomialArithmetic(t *testing.T) {
	// The inverse powers rely on x having order 2^32-1.
	if got := xPow(1<<32 - 1); got != crcOne {
		t.Fatalf("x^(2^32-1) = %#x, want 1 (%#x)", got, uint32(crcOne))
	}
	for _, n := range []uint64{0, 1, 7, 100, 4096, 65535} {
		if got := mulModP(xPow8n(n), xPowNeg8n(n)); got != crcOne {
			t.Errorf("x^(8·%d)·x^(-8·%d) = %#x, want 1", n, n, got)
		}
		if got, want := xPow8n(n), xPow(8*n); got != want {
			t.Errorf("xPow8n(%d) = %#x, xPow(%d) = %#x", n, got, 8*n, want)
		}
	}
}

func TestParseDatagram(t *testing.T) {
	roce, _ := AppendPacket(nil, sampleHeaders(RCSendOnly), []byte("abcd"))
	ph := &PseudoHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 0xc000, DstPort: UDPPort, IPv4ID: 7, IPv4Flags: IPv4DontFragment}
	v4 := buildDatagram(ph, roce, 0, 64)
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"ipv4", v4, nil},
		{"ipv4 with link padding", append(append([]byte(nil), v4...), 0, 0, 0, 0, 0, 0), nil},
		{"empty", nil, ErrTruncated},
		{"short ipv4", v4[:19], ErrTruncated},
		{"total length past end", v4[:len(v4)-1], ErrTruncated},
		{"tcp", func() []byte { b := append([]byte(nil), v4...); b[9] = 6; return b }(), ErrNotUDP},
		{"fragment", func() []byte { b := append([]byte(nil), v4...); b[6] |= 0x20; return b }(), ErrNotUDP},
		{"ihl 4", func() []byte { b := append([]byte(nil), v4...); b[0] = 0x44; return b }(), ErrLength},
		{"udp length too long", func() []byte { b := append([]byte(nil), v4...); b[25] += 8; return b }(), ErrLength},
		{"ip version 5", []byte{0x50}, ErrNotUDP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ParseDatagram(tt.b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err == nil {
				if !bytes.Equal(d.Payload, roce) || d.SrcPort() != 0xc000 || d.DstPort() != UDPPort || d.IPv4ID() != 7 {
					t.Errorf("datagram %+v", d)
				}
			}
		})
	}
}

func TestXRCETHCarriesTheSRQNumberAfterTheBTH(t *testing.T) {
	tests := []struct {
		name string
		op   OpCode
		srqn uint32
		want uint32 // what the packet carries: 24 bits
		off  int    // where the next header or the payload starts
	}{
		{"SEND_ONLY", XRCSendOnly, 0x000001, 0x000001, BTHLen + XRCETHLen},
		{"reserved bits dropped", XRCSendOnly, 0xff123456, 0x123456, BTHLen + XRCETHLen},
		{"RETH after XRCETH", XRCWriteFirst, 0xabcdef, 0xabcdef, BTHLen + XRCETHLen},
		{"AtomicETH after XRCETH", XRCFetchAdd, 0x00ffff, 0x00ffff, BTHLen + XRCETHLen},
		{"ImmDt after XRCETH", XRCSendOnlyWithImmediate, 7, 7, BTHLen + XRCETHLen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := sampleHeaders(tt.op)
			h.XRCSRQN = tt.srqn
			b, err := AppendPacket(nil, h, samplePayload(tt.op, 8))
			if err != nil {
				t.Fatal(err)
			}
			if got := binary.BigEndian.Uint32(b[BTHLen:]); got != tt.want {
				t.Fatalf("bytes after the BTH %#08x, want %#08x (reserved byte zero)", got, tt.want)
			}
			p, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if p.XRCETH.SRQN() != tt.want || p.Headers().XRCSRQN != tt.want {
				t.Fatalf("SRQN %#x, want %#x", p.XRCETH.SRQN(), tt.want)
			}
			switch {
			case p.RETH != nil:
				if &p.RETH[0] != &b[tt.off] || p.RETH.RKey() != h.RETH.RKey {
					t.Fatal("RETH not right after the XRCETH")
				}
			case p.AtomicETH != nil:
				if &p.AtomicETH[0] != &b[tt.off] || p.AtomicETH.SwapAdd() != h.AtomicETH.SwapAdd {
					t.Fatal("AtomicETH not right after the XRCETH")
				}
			case p.ImmDt != nil:
				if &p.ImmDt[0] != &b[tt.off] || p.ImmDt.Imm() != h.Imm {
					t.Fatal("ImmDt not right after the XRCETH")
				}
			default:
				if &p.Payload[0] != &b[tt.off] {
					t.Fatal("payload not right after the XRCETH")
				}
			}
		})
	}
	// Responses to XRC requests carry no XRCETH.
	for _, op := range []OpCode{XRCAcknowledge, XRCAtomicAcknowledge, XRCReadResponseFirst, XRCReadResponseMiddle, XRCReadResponseLast, XRCReadResponseOnly} {
		b, _ := AppendPacket(nil, sampleHeaders(op), samplePayload(op, 4))
		if p, err := Parse(b); err != nil || p.XRCETH != nil {
			t.Errorf("%s: XRCETH %x, err %v", op, []byte(p.XRCETH), err)
		}
	}
}
