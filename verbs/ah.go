package verbs

import (
	"encoding/binary"
	"net/netip"
)

// GRHLen is the size of the global route header area at the start of every
// UD receive buffer: a completion with WCWithGRH has the packet's network
// header there (the IPv6 header, or for IPv4 the IPv4 header in its last 20
// bytes), and ByteLen counts it.
const GRHLen = 40

// GRHAddrs returns the source and destination addresses a UD receive
// buffer's GRH area holds: an IPv6 header, or an IPv4 header in its last
// 20 bytes, told apart as libibverbs does (an IPv4 header with a valid
// checksum wins).
func GRHAddrs(grh []byte) (src, dst netip.Addr, tclass uint8, flow uint32, ok bool) {
	src, dst, tclass, flow, _, ok = parseGRH(grh)
	return src, dst, tclass, flow, ok
}

// parseGRH is GRHAddrs with the hop limit (IPv4 TTL) too.
func parseGRH(grh []byte) (src, dst netip.Addr, tclass uint8, flow uint32, hop uint8, ok bool) {
	if len(grh) < GRHLen {
		return src, dst, 0, 0, 0, false
	}
	if ip4 := grh[20:40]; ip4[0] == 0x45 && ipv4Checksum(ip4) == 0 {
		src = netip.AddrFrom4([4]byte(ip4[12:16]))
		dst = netip.AddrFrom4([4]byte(ip4[16:20]))
		return src, dst, ip4[1], 0, ip4[8], true
	}
	if grh[0]>>4 == 6 {
		w := binary.BigEndian.Uint32(grh[0:4])
		src = netip.AddrFrom16([16]byte(grh[8:24]))
		dst = netip.AddrFrom16([16]byte(grh[24:40]))
		return src, dst, uint8(w >> 20), w & 0xfffff, grh[7], true
	}
	return src, dst, 0, 0, 0, false
}

// ipv4Checksum returns the one's complement sum of an IPv4 header, which
// is 0 when its checksum field is right.
func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// InitAHFromWC returns the address vector that answers the sender of a
// received UD message (ibv_init_ah_from_wc): the destination is the
// packet's source GID, the source GID index that of the address it was
// sent to, the hop limit and traffic class those it came with. grh is the
// receive buffer's first GRHLen bytes. A message sent to a multicast group
// cannot be answered this way (EINVAL), as in libibverbs.
func (c *Context) InitAHFromWC(port uint8, wc *WC, grh []byte) (AHAttr, error) {
	const op = "ibv_init_ah_from_wc"
	var a AHAttr
	if err := c.check(op); err != nil {
		return a, err
	}
	if wc.WCFlags&WCWithGRH == 0 {
		return a, Errorf(op, ErrInvalidArgument, "the completion has no GRH (RoCE needs one to answer)")
	}
	src, dst, tclass, flow, hop, ok := parseGRH(grh)
	if !ok {
		return a, Errorf(op, ErrInvalidArgument, "the GRH area holds neither an IPv6 nor an IPv4 header")
	}
	if dst.IsMulticast() {
		// As libibverbs: no local GID is the group's, so there is no
		// source GID to answer from.
		return a, Errorf(op, ErrInvalidArgument, "the message was sent to multicast group "+dst.String())
	}
	pa, err := c.QueryPort(port)
	if err != nil {
		return a, err
	}
	idx := -1
	want := GIDFromAddr(dst)
	for i := 0; i < pa.GIDTblLen; i++ {
		g, err := c.QueryGID(port, i)
		if err != nil {
			return a, err
		}
		if g == want {
			idx = i
			break
		}
	}
	if idx < 0 {
		return a, Errorf(op, ErrInvalidArgument, "no local GID "+dst.String()+" on port "+itoa(int(port)))
	}
	a = AHAttr{
		GRH:      GlobalRoute{DGID: GIDFromAddr(src), FlowLabel: flow, SGIDIndex: uint8(idx), HopLimit: hop, TrafficClass: tclass},
		DLID:     wc.SLID,
		SL:       wc.SL,
		IsGlobal: true,
		PortNum:  port,
	}
	return a, nil
}

// CreateAHFromWC creates an address handle that answers the sender of a
// received UD message (ibv_create_ah_from_wc).
func (pd *PD) CreateAHFromWC(wc *WC, grh []byte, port uint8) (*AH, error) {
	a, err := pd.ctx.InitAHFromWC(port, wc, grh)
	if err != nil {
		return nil, err
	}
	return pd.CreateAH(&a)
}
