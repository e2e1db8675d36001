package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"net/netip"
)

// The invariant CRC (IBTA vol. 1 Annex A17.3.3) is CRC-32 (the IEEE
// polynomial, as in Ethernet and zlib) over the packet from the IP header to
// the end of the payload and pad, with the fields routers may change
// replaced by ones:
//
//   - eight 0xff bytes standing for the LRH that RoCEv2 has not got;
//   - IPv4: the type of service, TTL and header checksum;
//     IPv6: the traffic class, flow label and hop limit;
//   - the UDP checksum;
//   - BTH byte 4 (FECN, BECN and reserved bits).
//
// Everything else is covered as sent, including the IPv4 total length,
// identification and flags and the UDP ports and length. The CRC is stored
// in the packet's last four bytes, least significant byte first.

// icrcSeed is the CRC state after the eight masked LRH bytes.
var icrcSeed = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// crcSmall continues an IEEE CRC-32 over a few bytes. It is for the small
// masked headers, which live on the stack: handing those to crc32.Update
// would move them to the heap (it calls through a function variable, which
// escape analysis cannot see into). It takes eight bytes a step, with eight
// tables (the "slicing by 8" method), and the rest a byte at a time.
func crcSmall(crc uint32, b []byte) uint32 {
	crc = ^crc
	t := &crcTables
	for len(b) >= 8 {
		crc ^= binary.LittleEndian.Uint32(b)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][crc>>24] ^
			t[3][b[4]] ^ t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]]
		b = b[8:]
	}
	for _, v := range b {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// crcTables[k][v] is the CRC register's change from byte v followed by k
// zero bytes: crcTables[0] is crc32.IEEETable, and each next table is the
// one before carried through one more byte.
var crcTables = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for k := 1; k < len(t); k++ {
		for v := range t[k] {
			c := t[k-1][v]
			t[k][v] = t[0][byte(c)] ^ c>>8
		}
	}
	return t
}()

// icrcTransport continues crc over pkt (BTH to ICRC, len(pkt) ≥ BTHLen+ICRCLen)
// with BTH byte 4 masked, stopping before the ICRC. hdr holds the masked
// IP and UDP headers before it, and has room for the BTH after them: the
// two go through crcSmall together.
func icrcTransport(crc uint32, hdr, pkt []byte) uint32 {
	n := len(hdr)
	hdr = append(hdr, pkt[:BTHLen]...)
	hdr[n+bthQPN] = 0xff
	crc = crcSmall(crc, hdr)
	return crc32.Update(crc, crc32.IEEETable, pkt[BTHLen:len(pkt)-ICRCLen])
}

// PseudoHeader holds what the ICRC covers of the IP and UDP headers a
// sender on a UDP socket does not write itself, and that a receiver on one
// does not see. From it the masked headers are rebuilt: an IPv4 header of 20
// bytes without options, or an IPv6 header without extension headers.
type PseudoHeader struct {
	// Src and Dst are the IP addresses. IPv4-mapped IPv6 addresses (the
	// form of RoCEv2 GIDs) stand for IPv4 and are sent as IPv4.
	Src, Dst netip.Addr
	// SrcPort and DstPort are the UDP ports (DstPort is UDPPort).
	SrcPort, DstPort uint16
	// IPv4ID and IPv4Flags are the identification and the
	// flags-and-fragment-offset fields of IPv4. A Linux UDP socket in
	// IP_PMTUDISC_DO mode sends ID 0 and flags IPv4DontFragment.
	IPv4ID    uint16
	IPv4Flags uint16
}

// ipv4 reports whether the pseudo header describes IPv4.
func (ph *PseudoHeader) ipv4() bool { return ph.Src.Unmap().Is4() }

// putHeaders writes into hdr (room for an IPv6 and a UDP header) the
// masked IP and UDP headers of a datagram whose UDP payload is n bytes long,
// and returns them.
func (ph *PseudoHeader) putHeaders(hdr []byte, n int) []byte {
	var ip []byte
	if ph.ipv4() {
		ip = hdr[:IPv4MinLen]
		ip[0] = 0x45
		ip[1] = 0xff // TOS
		binary.BigEndian.PutUint16(ip[2:], uint16(IPv4MinLen+UDPLen+n))
		binary.BigEndian.PutUint16(ip[4:], ph.IPv4ID)
		binary.BigEndian.PutUint16(ip[6:], ph.IPv4Flags)
		ip[8] = 0xff // TTL
		ip[9] = protoUDP
		ip[10], ip[11] = 0xff, 0xff // header checksum
		src, dst := ph.Src.Unmap().As4(), ph.Dst.Unmap().As4()
		copy(ip[12:], src[:])
		copy(ip[16:], dst[:])
	} else {
		ip = hdr[:IPv6Len]
		ip[0], ip[1], ip[2], ip[3] = 0x6f, 0xff, 0xff, 0xff // version, traffic class, flow label
		binary.BigEndian.PutUint16(ip[4:], uint16(UDPLen+n))
		ip[6] = protoUDP
		ip[7] = 0xff // hop limit
		src, dst := ph.Src.As16(), ph.Dst.As16()
		copy(ip[8:], src[:])
		copy(ip[24:], dst[:])
	}
	udp := hdr[len(ip) : len(ip)+UDPLen]
	binary.BigEndian.PutUint16(udp[0:], ph.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], ph.DstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(UDPLen+n))
	udp[6], udp[7] = 0xff, 0xff // checksum
	return hdr[:len(ip)+UDPLen]
}

// ICRC computes the invariant CRC of pkt, a RoCEv2 packet from the BTH to
// the ICRC (whose own four bytes are not read), as sent with ph's IP and UDP
// headers. It returns 0 if pkt is shorter than a BTH and an ICRC.
func (ph *PseudoHeader) ICRC(pkt []byte) uint32 {
	if len(pkt) < BTHLen+ICRCLen {
		return 0
	}
	var buf [IPv6Len + UDPLen + BTHLen]byte
	return icrcTransport(icrcSeed, ph.putHeaders(buf[:IPv6Len+UDPLen], len(pkt)), pkt)
}

// SetICRC computes the ICRC of pkt and stores it in pkt's last four bytes.
func (ph *PseudoHeader) SetICRC(pkt []byte) {
	if len(pkt) < BTHLen+ICRCLen {
		return
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], ph.ICRC(pkt))
}

// CheckICRC reports whether pkt's ICRC matches its content sent with ph's
// IP and UDP headers.
func (ph *PseudoHeader) CheckICRC(pkt []byte) bool {
	return len(pkt) >= BTHLen+ICRCLen &&
		binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) == ph.ICRC(pkt)
}

// CheckICRCAnyIPv4ID is CheckICRC for a receiver that cannot see the
// sender's IPv4 identification field and DF bit (a plain UDP socket). It
// reports whether some choice of the 16 ID bits and the DF bit makes pkt's
// ICRC match, and returns that choice (ph.IPv4ID and ph.IPv4Flags are
// ignored). CRC-32 is linear in its input, so this takes a small linear
// solve rather than a search; the price is that a corrupted packet slips
// through with probability 2^-15 instead of 2^-32. For IPv6, where every IP
// field the ICRC covers is known, it is CheckICRC. A receiver checking many
// packets should keep an IPv4IDSolver, which remembers work between them.
func (ph *PseudoHeader) CheckICRCAnyIPv4ID(pkt []byte) (id, flags uint16, ok bool) {
	var s IPv4IDSolver
	return s.Check(ph, pkt)
}

// IPv4IDSolver does CheckICRCAnyIPv4ID for a stream of packets, caching
// what depends only on the packet length. The zero value is ready to use;
// it is not safe for concurrent use.
type IPv4IDSolver struct {
	n   int    // packet length the cached shift is for
	inv uint32 // x^(-8T) for that length
}

// Check is PseudoHeader.CheckICRCAnyIPv4ID.
func (s *IPv4IDSolver) Check(ph *PseudoHeader, pkt []byte) (id, flags uint16, ok bool) {
	if len(pkt) < BTHLen+ICRCLen {
		return 0, 0, false
	}
	if !ph.ipv4() {
		return 0, 0, ph.CheckICRC(pkt)
	}
	// Fast path: what Linux sends from an unconnected UDP socket in
	// IP_PMTUDISC_DO mode: ID 0 with DF set.
	base := *ph
	base.IPv4ID, base.IPv4Flags = 0, IPv4DontFragment
	delta := binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) ^ base.ICRC(pkt)
	if delta == 0 {
		return 0, IPv4DontFragment, true
	}
	// The unknown bits e (relative to ID 0 without DF) change the CRC by
	// Σ e_j·v_j·x^(8T), v_j being bit j's effect at the end of the IPv4
	// header and T the number of bytes after it. Undo the shift, then
	// express the result in the basis of the v_j.
	if s.n != len(pkt) {
		s.n, s.inv = len(pkt), xPowNeg8n(uint64(UDPLen+len(pkt)-ICRCLen))
	}
	u := mulModP(delta, s.inv) ^ ipv4IDBitEffect[16]
	var c uint32
	for u != 0 {
		p := bits.Len32(u) - 1
		if idBasis.vec[p] == 0 {
			return 0, 0, false
		}
		u ^= idBasis.vec[p]
		c ^= idBasis.combo[p]
	}
	id = uint16(c)
	if c&(1<<16) != 0 {
		flags = IPv4DontFragment
	}
	return id, flags, true
}

// idBasis is ipv4IDBitEffect in reduced form: vec[p] has its highest bit at
// p, and combo[p] says which unknown bits it is the sum of.
var idBasis = func() (b struct{ vec, combo [32]uint32 }) {
	for j, v := range ipv4IDBitEffect {
		c := uint32(1) << j
		for v != 0 {
			p := bits.Len32(v) - 1
			if b.vec[p] == 0 {
				b.vec[p], b.combo[p] = v, c
				break
			}
			v ^= b.vec[p]
			c ^= b.combo[p]
		}
	}
	return b
}()

// ipv4IDBitEffect[j] is the CRC difference made by flipping unknown bit j in
// a 20-byte IPv4 header, as seen right after the header: bits 0-15 are the
// identification field, bit 16 the DF flag.
var ipv4IDBitEffect = func() (e [17]uint32) {
	var zero, hdr [IPv4MinLen]byte
	z := crc32.ChecksumIEEE(zero[:])
	for j := range e {
		hdr = zero
		if j < 16 {
			binary.BigEndian.PutUint16(hdr[4:], 1<<j)
		} else {
			binary.BigEndian.PutUint16(hdr[6:], IPv4DontFragment)
		}
		e[j] = crc32.ChecksumIEEE(hdr[:]) ^ z
	}
	return e
}()

// The reflected IEEE polynomial, and x^0 in the reflected representation
// that hash/crc32 uses (bit 31 holds the coefficient of x^0).
const (
	crcPoly = 0xedb88320
	crcOne  = 1 << 31
)

// mulModP returns a·b modulo the CRC-32 polynomial, in reflected form.
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(crcOne); m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPowNeg8 holds x^(-8·2^k) modulo the polynomial. x has order 2^32-1
// modulo the CRC-32 polynomial (x^(2^32-1) = 1, checked by a test), so
// x^(-m) = x^(2^32-1-m).
var xPowNeg8 = func() (t [64]uint32) {
	const order = 1<<32 - 1
	for k := range t {
		m := (uint64(8) << k) % order
		t[k] = xPow(order - m)
	}
	return t
}()

// xPow returns x^e modulo the polynomial.
func xPow(e uint64) uint32 {
	r, b := uint32(crcOne), uint32(crcOne>>1) // 1 and x
	for ; e != 0; e >>= 1 {
		if e&1 != 0 {
			r = mulModP(r, b)
		}
		b = mulModP(b, b)
	}
	return r
}

// xPowNeg8n returns x^(-8n) modulo the polynomial.
func xPowNeg8n(n uint64) uint32 {
	r := uint32(crcOne)
	for k := 0; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			r = mulModP(r, xPowNeg8[k])
		}
	}
	return r
}

// ICRC computes the invariant CRC of the datagram's RoCEv2 payload from its
// real IP and UDP headers (IPv4 options included), as a capture shows them.
// It returns 0 if the payload is shorter than a BTH and an ICRC.
func (d *Datagram) ICRC() uint32 {
	if len(d.Payload) < BTHLen+ICRCLen {
		return 0
	}
	var hdr [60 + UDPLen + BTHLen]byte
	n := copy(hdr[:60], d.IP)
	ip := hdr[:n]
	if d.IsIPv4() {
		ip[1] = 0xff
		ip[8] = 0xff
		ip[10], ip[11] = 0xff, 0xff
	} else {
		ip[0] |= 0x0f
		ip[1], ip[2], ip[3] = 0xff, 0xff, 0xff
		ip[7] = 0xff
	}
	udp := hdr[n : n+UDPLen]
	copy(udp, d.UDP)
	udp[6], udp[7] = 0xff, 0xff
	return icrcTransport(icrcSeed, hdr[:n+UDPLen], d.Payload)
}

// CheckICRC reports whether the ICRC in the datagram's last four bytes
// matches the one computed from its headers and content.
func (d *Datagram) CheckICRC() bool {
	p := d.Payload
	return len(p) >= BTHLen+ICRCLen && binary.LittleEndian.Uint32(p[len(p)-ICRCLen:]) == d.ICRC()
}

// PseudoHeader returns the pseudo header that describes d.
func (d *Datagram) PseudoHeader() PseudoHeader {
	return PseudoHeader{
		Src: d.Src, Dst: d.Dst,
		SrcPort: d.SrcPort(), DstPort: d.DstPort(),
		IPv4ID: d.IPv4ID(), IPv4Flags: d.IPv4Flags(),
	}
}
