package verbs

import (
	"encoding/hex"
	"net/netip"
)

// GID is a 128-bit global identifier (union ibv_gid). On RoCEv2 a GID is an
// IP address: an IPv6 address, or an IPv4 address in its IPv4-mapped form
// ::ffff:a.b.c.d.
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID as an IP address; IPv4-mapped GIDs come back as IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsZero reports whether the GID is all zeros (an unused GID table entry).
func (g GID) IsZero() bool { return g == GID{} }

// String formats the GID as eight groups of four hex digits separated by
// colons ("0000:0000:0000:0000:0000:ffff:0a4d:000b"), the way ibv_devinfo
// prints InfiniBand GIDs. For a RoCEv2 GID, Addr().String() gives the
// address form ibv_devinfo prints for those.
func (g GID) String() string {
	var b [39]byte
	for i := 0; i < 8; i++ {
		if i > 0 {
			b[i*5-1] = ':'
		}
		hex.Encode(b[i*5:i*5+4], g[i*2:i*2+2])
	}
	return string(b[:])
}

// Hex formats the GID as 32 hex digits, bytes in order: the GID field of
// the ibv_rc_pingpong exchange string.
func (g GID) Hex() string { return hex.EncodeToString(g[:]) }

// ParseGIDHex parses 32 hex digits as written by Hex.
func ParseGIDHex(s string) (GID, error) {
	var g GID
	if len(s) != 32 {
		return g, Errorf("parse GID", ErrInvalidArgument, "want 32 hex digits, got "+quote(s))
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return g, Errorf("parse GID", ErrInvalidArgument, "bad hex digits in "+quote(s))
	}
	return g, nil
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return `"` + s + `"`
}
