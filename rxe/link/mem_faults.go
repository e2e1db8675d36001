package link

import (
	"math/rand/v2"
	"net/netip"
	"time"
)

// Faults describes how an in-memory Network mistreats packets. The zero
// value delivers every packet intact, in order, at once. Probabilities are
// per packet sent, from 0 (never) to 1 (always).
type Faults struct {
	// Drop is the probability that a packet is lost.
	Drop float64
	// Duplicate is the probability that a packet is delivered twice. The
	// extra copy arrives first, in order and intact, whatever else
	// befalls the packet.
	Duplicate float64
	// Reorder is the probability that a packet is held back and delivered
	// after the next one to three packets to the same destination (or,
	// if none follow, ReorderHold after it was sent).
	Reorder float64
	// Corrupt is the probability that one bit of a packet, chosen at
	// random, is flipped. The bit is never in BTH byte 4 (FECN, BECN and
	// reserved bits), which the ICRC does not cover, so the receiver's
	// ICRC check catches every corrupted packet.
	Corrupt float64
	// Delay is a fixed one-way latency (0 for none). Packets still arrive
	// in the order they were sent.
	Delay time.Duration
	// Filter, if set, is called with every packet sent (after its ICRC is
	// computed, before any other fault) and its source and destination
	// addresses; the packet is dropped if it returns false. It must not
	// modify or keep p, and may be called from several goroutines at once.
	Filter func(p []byte, from, to netip.Addr) bool
}

// ReorderHold is the longest a reordered packet waits for later packets to
// overtake it: a packet held back at the end of a burst is then delivered
// anyway, late rather than lost. Only then does the order of deliveries
// depend on timing rather than on the seed alone.
const ReorderHold = 10 * time.Millisecond

// maxReorderDepth is the most later packets a reordered packet is delivered
// after.
const maxReorderDepth = 3

// verdict is what the network does to one packet.
type verdict struct {
	drop, duplicate bool
	corruptBit      int // the bit to flip, or -1
	reorderAfter    int // later packets to deliver first, or 0
}

// judge draws the fate of an n-byte packet from rng, one draw per fault
// that is switched on, always in the same order, so that a seed and a
// sequence of sends give the same faults whatever becomes of the packets.
func (f *Faults) judge(rng *rand.Rand, n int) verdict {
	v := verdict{corruptBit: -1}
	v.drop = chance(rng, f.Drop)
	v.duplicate = chance(rng, f.Duplicate)
	if chance(rng, f.Reorder) {
		v.reorderAfter = 1 + rng.IntN(maxReorderDepth)
	}
	if chance(rng, f.Corrupt) {
		v.corruptBit = corruptibleBit(rng, n)
	}
	return v
}

// chance draws whether an event of probability p happens; it draws nothing
// when p is 0 or less.
func chance(rng *rand.Rand, p float64) bool {
	return p > 0 && rng.Float64() < p
}

// bthByte4 is the offset of the BTH byte the ICRC leaves out.
const bthByte4 = 4

// corruptibleBit picks a bit of an n-byte packet that the ICRC covers: any
// bit but those of BTH byte 4. It returns -1 if there is none.
func corruptibleBit(rng *rand.Rand, n int) int {
	bits := n * 8
	if n > bthByte4 {
		bits -= 8
	}
	if bits <= 0 {
		return -1
	}
	b := rng.IntN(bits)
	if n > bthByte4 && b >= bthByte4*8 {
		b += 8
	}
	return b
}

// flipBit flips bit b of p (bit 0 is the low bit of p[0]).
func flipBit(p []byte, b int) { p[b/8] ^= 1 << (b % 8) }
