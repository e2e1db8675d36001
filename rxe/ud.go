package rxe

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// multicastQPN is the destination QP number of a packet sent to a
// multicast group (IBTA vol. 1 §10.5.2.5).
const multicastQPN = 0xffffff

// udDest is where a UD send goes: the address handle's destination as it
// was when the work request was posted, and the work request's QP and
// Q_Key.
type udDest struct {
	addr netip.Addr
	sgid int
	qpn  uint32
	qkey uint32 // as given: the QP's own if the high bit is set
}

// checkUD checks the UD part of a send work request and returns its
// destination (q.mu held).
func (q *qp) checkUD(wr *verbs.SendWR, length uint64) (udDest, error) {
	bad := func(format string, args ...any) error {
		return verbs.Errorf("ibv_post_send", verbs.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	if wr.AH == nil {
		return udDest{}, bad("a UD send needs an address handle (wr.ud.ah)")
	}
	a, ok := verbs.AHDriverOf(wr.AH).(*ah)
	if !ok || a.pd != q.pd {
		return udDest{}, bad("the address handle belongs to another protection domain")
	}
	if mtu := q.hw.mtu.Bytes(); length > uint64(mtu) {
		return udDest{}, bad("UD message of %d bytes above the path MTU of %d", length, mtu)
	}
	d := udDest{addr: a.attr.GRH.DGID.Addr(), sgid: int(a.attr.GRH.SGIDIndex), qpn: wr.RemoteQPN & 0xffffff, qkey: wr.RemoteQKey}
	if d.addr.IsMulticast() {
		d.qpn = multicastQPN
	}
	return d, nil
}

// buildUD builds the one packet of a UD send into the out batch.
func (r *requester) buildUD(w *sendWQE) {
	d := &w.ud
	qkey := d.qkey
	switch {
	case r.typ == verbs.QPTGSI:
		qkey = wire.GSIQKey // QP1 sends MADs with the well-known Q_Key, as rxe does
	case qkey&wire.QKeyPrivileged != 0:
		// A Q_Key with the high bit set asks for the QP's own
		// (IBTA vol. 1 §10.2.5); that is how a non-privileged sender
		// sends with a controlled Q_Key. (Linux rxe sends the work
		// request's Q_Key as it is.)
		qkey = r.attr.qkey
	}
	h := wire.Headers{
		BTH:  wire.BTHFields{OpCode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: d.qpn, PSN: w.firstPSN},
		DETH: wire.DETHFields{QKey: qkey, SrcQP: r.qpn},
		Imm:  w.wr.ImmData,
	}
	if w.wr.Opcode == verbs.WRSendWithImm {
		h.BTH.OpCode = wire.UDSendOnlyWithImmediate
	}
	h.BTH.SolicitedEvent = w.wr.SendFlags&verbs.SendSolicited != 0
	p := r.host.queueOutTo(d.addr, d.sgid)
	buf, payload, err := wire.AppendHeaders(p.Buf, &h, int(w.length))
	if err != nil {
		panic("rxe: building " + h.BTH.OpCode.String() + ": " + err.Error())
	}
	if w.isInline() {
		copy(payload, w.inline)
	} else {
		gather(payload, w.segs, 0)
	}
	p.Buf = buf
	w.sent = 1
	w.done = true
	r.sq.una = w.firstPSN.Add(1)
}

// receiveUD handles a packet for a UD QP: one message, which lands behind
// the 40-byte GRH area of the next receive WQE.
func (q *qp) receiveUD(p *wire.Packet, in *inPacket) {
	switch q.st.state {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD, verbs.QPSSQE:
	default:
		return
	}
	want := q.st.qkey
	if q.typ == verbs.QPTGSI {
		want = wire.GSIQKey // QP1 takes the well-known Q_Key only
	}
	if p.DETH == nil || p.DETH.QKey() != want {
		return // Q_Key violation: dropped (IBTA C10-15)
	}
	w := q.resp.popRecv()
	if w == nil {
		return // no receive posted: UD drops the message
	}
	segs, total, ok := q.hw.resolveSGEs(q.pd, w.sges, true, q.resp.segsBuf[:0])
	q.resp.segsBuf = segs[:0]
	if !ok {
		// In ERR before the completion can be polled (responder.failRecv).
		q.event(verbs.EventQPFatal)
		q.toError()
		q.pushRecv(nil, verbs.WC{WRID: w.wrid, Status: verbs.WCLocProtErr, Opcode: verbs.WCRecv, QPNum: q.num}, false)
		return
	}
	n := uint64(verbs.GRHLen + len(p.Payload))
	if n > total {
		// IBTA's local length error; Linux rxe drops such a message
		// and keeps the WQE, which hides the sender's mistake.
		q.pushRecv(nil, verbs.WC{WRID: w.wrid, Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv, QPNum: q.num}, false)
		return
	}
	var grh [verbs.GRHLen]byte
	dst := in.dst
	if !dst.IsValid() && int(in.link) < len(q.hw.gids) {
		dst = q.hw.gids[in.link].Addr()
	}
	fillGRH(&grh, in.src, dst, in.tclass, in.hop, len(in.buf))
	scatter(segs, 0, grh[:])
	scatter(segs, verbs.GRHLen, p.Payload)
	wc := verbs.WC{WRID: w.wrid, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(n), QPNum: q.num,
		SrcQP: p.DETH.SrcQP(), WCFlags: verbs.WCWithGRH}
	if p.ImmDt != nil {
		wc.ImmData, wc.WCFlags = p.ImmDt.Imm(), wc.WCFlags|verbs.WCWithImm
	}
	q.pushRecv(nil, wc, p.BTH.SolicitedEvent())
}

// fillGRH writes the network header of a received packet into a GRH area
// as Linux rxe does: the IPv6 header, or 20 zero bytes and the IPv4
// header. The UDP socket does not show the IPv4 ID; it is written as 0,
// what RoCEv2 senders with DF set use.
func fillGRH(g *[verbs.GRHLen]byte, src, dst netip.Addr, tclass, hop uint8, roceLen int) {
	const udpLen = 8
	if src.Is4() && dst.Is4() {
		ip := g[20:40]
		ip[0] = 0x45
		ip[1] = tclass
		binary.BigEndian.PutUint16(ip[2:], uint16(20+udpLen+roceLen))
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8] = hop
		ip[9] = 17 // UDP
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		return
	}
	binary.BigEndian.PutUint32(g[0:], 6<<28|uint32(tclass)<<20)
	binary.BigEndian.PutUint16(g[4:], uint16(udpLen+roceLen))
	g[6] = 17
	g[7] = hop
	s, d := src.As16(), dst.As16()
	copy(g[8:24], s[:])
	copy(g[24:40], d[:])
}
