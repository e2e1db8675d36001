package wire

// PSN is a 24-bit packet sequence number (IBTA vol. 1 §9.7.1). Arithmetic
// wraps modulo 2^24, and comparisons are by signed 24-bit distance, so they
// are correct across the wrap as long as the two numbers are less than 2^23
// apart (the spec keeps outstanding PSNs within that window).
type PSN uint32

// PSNMask keeps the 24 significant bits of a PSN.
const PSNMask = 0x00ffffff

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Diff returns the signed distance p-q, in [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 {
	d := (uint32(p) - uint32(q)) & PSNMask
	return int32(d<<8) >> 8 // sign-extend 24 bits
}

// Less reports whether p comes before q.
func (p PSN) Less(q PSN) bool { return p.Diff(q) < 0 }

// LessEq reports whether p comes before q or equals it.
func (p PSN) LessEq(q PSN) bool { return p.Diff(q) <= 0 }

// InWindow reports whether p lies in [first, first+size).
func (p PSN) InWindow(first PSN, size uint32) bool {
	return (uint32(p)-uint32(first))&PSNMask < size
}
