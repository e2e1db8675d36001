package wire

import "encoding/binary"

// BTH is a view of a Base Transport Header (IBTA vol. 1 §9.2):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad|  TVer |            P_Key              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|  Resv6    |                   DestQP                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   Resv7     |                     PSN                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// F and B are the FECN and BECN bits of RoCEv2 (Annex A17). Accessors do no
// bounds checks: obtain a BTH from Parse, or slice at least BTHLen bytes.
type BTH []byte

const (
	bthOpCode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthQPN    = 4 // FECN, BECN, Resv6 and DestQP share this 32-bit word
	bthPSN    = 8 // AckReq, Resv7 and PSN share this 32-bit word

	bthSE       = 0x80
	bthMigReq   = 0x40
	bthPadMask  = 0x30
	bthPadShift = 4
	bthTVerMask = 0x0f
	bthFECN     = 0x80
	bthBECN     = 0x40
	bthAckReq   = 0x80

	mask24 = 0x00ffffff
)

// DefaultPKey is the default (full-membership) partition key.
const DefaultPKey = 0xffff

// OpCode returns the opcode.
func (b BTH) OpCode() OpCode { return OpCode(b[bthOpCode]) }

// SolicitedEvent returns the SE bit.
func (b BTH) SolicitedEvent() bool { return b[bthFlags]&bthSE != 0 }

// MigReq returns the MigReq bit.
func (b BTH) MigReq() bool { return b[bthFlags]&bthMigReq != 0 }

// PadCount returns the number of pad bytes (0-3) before the ICRC.
func (b BTH) PadCount() int { return int(b[bthFlags]&bthPadMask) >> bthPadShift }

// TVer returns the transport header version (0).
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVerMask }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthQPN]&bthFECN != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthQPN]&bthBECN != 0 }

// DestQP returns the destination queue pair number (24 bits).
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[bthQPN:]) & mask24 }

// AckReq returns the AckReq bit.
func (b BTH) AckReq() bool { return b[bthPSN]&bthAckReq != 0 }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(binary.BigEndian.Uint32(b[bthPSN:]) & mask24) }

// SetOpCode sets the opcode.
func (b BTH) SetOpCode(op OpCode) { b[bthOpCode] = uint8(op) }

// SetSolicitedEvent sets the SE bit.
func (b BTH) SetSolicitedEvent(v bool) { setBit(&b[bthFlags], bthSE, v) }

// SetMigReq sets the MigReq bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[bthFlags], bthMigReq, v) }

// SetPadCount sets the pad count (only its low two bits are kept).
func (b BTH) SetPadCount(n int) {
	b[bthFlags] = b[bthFlags]&^bthPadMask | uint8(n<<bthPadShift)&bthPadMask
}

// SetTVer sets the transport header version.
func (b BTH) SetTVer(v uint8) { b[bthFlags] = b[bthFlags]&^bthTVerMask | v&bthTVerMask }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[bthPKey:], k) }

// SetFECN sets the FECN bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthQPN], bthFECN, v) }

// SetBECN sets the BECN bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthQPN], bthBECN, v) }

// SetDestQP sets the destination QP number (its low 24 bits).
func (b BTH) SetDestQP(qpn uint32) { put24(b[bthQPN:], qpn) }

// SetAckReq sets the AckReq bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthPSN], bthAckReq, v) }

// SetPSN sets the packet sequence number, leaving AckReq alone. It is the
// cheap per-packet patch for a header built once from BTHFields.
func (b BTH) SetPSN(p PSN) { put24(b[bthPSN:], uint32(p)) }

// BTHFields holds the fields of a BTH for Encode.
type BTHFields struct {
	OpCode         OpCode
	SolicitedEvent bool
	MigReq         bool
	PadCount       int // 0-3; AppendPacket computes it from the payload
	TVer           uint8
	PKey           uint16
	FECN           bool
	BECN           bool
	DestQP         uint32 // 24 bits
	AckReq         bool
	PSN            PSN
}

// Encode writes every field of f into b.
func (b BTH) Encode(f *BTHFields) {
	b[bthOpCode] = uint8(f.OpCode)
	b[bthFlags] = boolBit(f.SolicitedEvent, bthSE) | boolBit(f.MigReq, bthMigReq) |
		uint8(f.PadCount<<bthPadShift)&bthPadMask | f.TVer&bthTVerMask
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	binary.BigEndian.PutUint32(b[bthQPN:], f.DestQP&mask24)
	b[bthQPN] = boolBit(f.FECN, bthFECN) | boolBit(f.BECN, bthBECN)
	binary.BigEndian.PutUint32(b[bthPSN:], uint32(f.PSN)&mask24)
	b[bthPSN] = boolBit(f.AckReq, bthAckReq)
}

// Fields returns the fields of b.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		OpCode:         b.OpCode(),
		SolicitedEvent: b.SolicitedEvent(),
		MigReq:         b.MigReq(),
		PadCount:       b.PadCount(),
		TVer:           b.TVer(),
		PKey:           b.PKey(),
		FECN:           b.FECN(),
		BECN:           b.BECN(),
		DestQP:         b.DestQP(),
		AckReq:         b.AckReq(),
		PSN:            b.PSN(),
	}
}

func setBit(p *uint8, bit uint8, v bool) {
	if v {
		*p |= bit
	} else {
		*p &^= bit
	}
}

func boolBit(v bool, bit uint8) uint8 {
	if v {
		return bit
	}
	return 0
}

// put24 writes the low 24 bits of v into b[1:4], keeping b[0].
func put24(b []byte, v uint32) {
	_ = b[3]
	b[1] = uint8(v >> 16)
	b[2] = uint8(v >> 8)
	b[3] = uint8(v)
}
