package wire

import (
	"encoding/binary"
	"time"
)

// RETH is a view of an RDMA Extended Transport Header (IBTA vol. 1 §9.3.3):
// virtual address (64), R_Key (32), DMA length (32).
type RETH []byte

// VA returns the remote virtual address.
func (h RETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey returns the remote key.
func (h RETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// DMALen returns the length of the whole RDMA operation in bytes.
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:]) }

// RETHFields holds the fields of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// Encode writes f into h.
func (h RETH) Encode(f *RETHFields) {
	binary.BigEndian.PutUint64(h[0:], f.VA)
	binary.BigEndian.PutUint32(h[8:], f.RKey)
	binary.BigEndian.PutUint32(h[12:], f.DMALen)
}

// AtomicETH is a view of an Atomic Extended Transport Header (IBTA vol. 1
// §9.3.4): virtual address (64), R_Key (32), swap or add data (64), compare
// data (64).
type AtomicETH []byte

// VA returns the remote virtual address (8-byte aligned in a valid request).
func (h AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey returns the remote key.
func (h AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// SwapAdd returns the swap (COMPARE_SWAP) or add (FETCH_ADD) operand.
func (h AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[12:]) }

// Compare returns the compare operand of a COMPARE_SWAP.
func (h AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(h[20:]) }

// AtomicETHFields holds the fields of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// Encode writes f into h.
func (h AtomicETH) Encode(f *AtomicETHFields) {
	binary.BigEndian.PutUint64(h[0:], f.VA)
	binary.BigEndian.PutUint32(h[8:], f.RKey)
	binary.BigEndian.PutUint64(h[12:], f.SwapAdd)
	binary.BigEndian.PutUint64(h[20:], f.Compare)
}

// AtomicAckETH is a view of an Atomic Acknowledge Extended Transport Header
// (IBTA vol. 1 §9.3.6): the original remote data (64).
type AtomicAckETH []byte

// OrigData returns the value the remote location held before the atomic.
func (h AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(h) }

// SetOrigData sets the original remote data.
func (h AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h, v) }

// ImmDt is a view of the Immediate Data header (IBTA vol. 1 §9.3.7): 32 bits
// the requester passes to the responder's completion.
type ImmDt []byte

// Imm returns the immediate data as it travels on the wire (big-endian).
func (h ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(h) }

// SetImm sets the immediate data.
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h, v) }

// IETH is a view of an Invalidate Extended Transport Header (IBTA vol. 1
// §9.3.8): the R_Key the responder invalidates.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (h IETH) RKey() uint32 { return binary.BigEndian.Uint32(h) }

// SetRKey sets the R_Key to invalidate.
func (h IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(h, k) }

// XRCETH is a view of an XRC Extended Transport Header (IBTA vol. 1 §9.3,
// carried by every XRC request right after the BTH): reserved (8), XRC SRQ
// number (24). The responder's XRC_RECV QP, reached by the BTH's
// destination QP, takes its receive WQE from the shared receive queue the
// XRCETH names, and checks remote access against that queue's PD.
type XRCETH []byte

// SRQN returns the number of the XRC shared receive queue the request is
// for (the requester's wr.qp_type.xrc.remote_srqn).
func (h XRCETH) SRQN() uint32 { return binary.BigEndian.Uint32(h) & mask24 }

// SetSRQN sets the XRC SRQ number, clearing the reserved bits.
func (h XRCETH) SetSRQN(n uint32) { binary.BigEndian.PutUint32(h, n&mask24) }

// DETH is a view of a Datagram Extended Transport Header (IBTA vol. 1
// §9.3.2): Q_Key (32), reserved (8), source QP (24).
type DETH []byte

// QKey returns the queue key.
func (h DETH) QKey() uint32 { return binary.BigEndian.Uint32(h[0:]) }

// SrcQP returns the sender's QP number.
func (h DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(h[4:]) & mask24 }

// DETHFields holds the fields of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32
}

// Encode writes f into h.
func (h DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(h[0:], f.QKey)
	binary.BigEndian.PutUint32(h[4:], f.SrcQP&mask24)
}

// GSIQKey is the well-known Q_Key of the General Services Interface (QP1).
const GSIQKey = 0x80010000

// QKeyPrivileged is the bit that marks a controlled (privileged) Q_Key: a
// UD send may use such a Q_Key only if its QP was given it (IBTA §10.2.4).
const QKeyPrivileged = 0x80000000

// FETH is a view of the Flush Extended Transport Header of the RDMA FLUSH
// operation (IBTA vol. 1 Annex A19): selectivity level and placement type.
type FETH []byte

// SelectivityLevel returns the SEL field (0: the range in the RETH; 1: the
// whole memory region).
func (h FETH) SelectivityLevel() uint8 { return uint8(binary.BigEndian.Uint32(h)>>4) & 0x3 }

// PlacementType returns the PLT field (bit 0: global visibility; bit 1:
// persistence).
func (h FETH) PlacementType() uint8 { return uint8(binary.BigEndian.Uint32(h)) & 0xf }

// SetFETH sets both FETH fields.
func (h FETH) Set(sel, plt uint8) { binary.BigEndian.PutUint32(h, uint32(sel&3)<<4|uint32(plt&0xf)) }

// AETH is a view of an ACK Extended Transport Header (IBTA vol. 1 §9.3.5):
// syndrome (8) and message sequence number (24).
type AETH []byte

// Syndrome returns the syndrome byte.
func (h AETH) Syndrome() Syndrome { return Syndrome(h[0]) }

// MSN returns the message sequence number.
func (h AETH) MSN() uint32 { return binary.BigEndian.Uint32(h) & mask24 }

// Encode writes the syndrome and MSN.
func (h AETH) Encode(s Syndrome, msn uint32) {
	binary.BigEndian.PutUint32(h, uint32(s)<<24|msn&mask24)
}

// Syndrome is the AETH syndrome (IBTA vol. 1 §9.7.5.1, table 42): bits 6-5
// say what it is, bits 4-0 carry a credit count, an RNR timer code or a NAK
// code.
type Syndrome uint8

// SyndromeKind is the kind of an AETH syndrome.
type SyndromeKind uint8

// Syndrome kinds (bits 6-5 of the syndrome).
const (
	KindACK      SyndromeKind = 0 // ACK with a credit count
	KindRNRNAK   SyndromeKind = 1 // receiver not ready, with a timer code
	KindReserved SyndromeKind = 2
	KindNAK      SyndromeKind = 3 // NAK with a NAK code
)

// NAK codes (the whole syndrome byte of a NAK).
const (
	NAKPSNSequenceError  Syndrome = 0x60
	NAKInvalidRequest    Syndrome = 0x61
	NAKRemoteAccessError Syndrome = 0x62
	NAKRemoteOperational Syndrome = 0x63
	NAKInvalidRDRequest  Syndrome = 0x64
	CreditsUnlimited              = 0x1f // credit code of an ACK for "no end-to-end flow control"
	SyndromeACKUnlimited Syndrome = CreditsUnlimited
)

// ACKSyndrome returns the syndrome of an ACK carrying credit code c (0-31).
func ACKSyndrome(c uint8) Syndrome { return Syndrome(c & 0x1f) }

// RNRNAKSyndrome returns the syndrome of an RNR NAK with timer code t (0-31).
func RNRNAKSyndrome(t uint8) Syndrome { return Syndrome(0x20 | t&0x1f) }

// Kind returns what the syndrome is.
func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s>>5) & 3 }

// Value returns the low five bits: the credit code of an ACK, the timer code
// of an RNR NAK or the code of a NAK.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

// creditCounts maps an ACK credit code to the number of receive credits
// (IBTA vol. 1 table 44). Code 31 means unlimited.
var creditCounts = [32]int{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, -1,
}

// Credits returns the number of credits an ACK syndrome advertises, or -1
// for unlimited. It is meaningless for a syndrome of another kind.
func (s Syndrome) Credits() int { return creditCounts[s.Value()] }

// rnrTimers maps an RNR timer code to its delay in microseconds (IBTA vol. 1
// table 45). Code 0 is the longest, 655.36 ms.
var rnrTimers = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerDuration returns the delay RNR timer code t (0-31) asks for
// (IBTA vol. 1 table 45; the min_rnr_timer attribute of ibv_modify_qp).
func RNRTimerDuration(t uint8) time.Duration {
	return time.Duration(rnrTimers[t&0x1f]) * time.Microsecond
}

// String names the syndrome: "ACK credits=unlimited", "RNR_NAK timer=12",
// "NAK PSN_SEQ_ERR" and so on.
func (s Syndrome) String() string {
	switch s.Kind() {
	case KindACK:
		if s.Value() == CreditsUnlimited {
			return "ACK credits=unlimited"
		}
		return "ACK credits=" + itoa(s.Credits())
	case KindRNRNAK:
		return "RNR_NAK timer=" + itoa(int(s.Value()))
	case KindNAK:
		switch s {
		case NAKPSNSequenceError:
			return "NAK PSN_SEQ_ERR"
		case NAKInvalidRequest:
			return "NAK INVALID_REQUEST"
		case NAKRemoteAccessError:
			return "NAK REMOTE_ACCESS_ERR"
		case NAKRemoteOperational:
			return "NAK REMOTE_OPERATIONAL_ERR"
		case NAKInvalidRDRequest:
			return "NAK INVALID_RD_REQUEST"
		}
		return "NAK code=" + itoa(int(s.Value()))
	}
	return "RESERVED syndrome=0x" + hex(uint64(s))
}
