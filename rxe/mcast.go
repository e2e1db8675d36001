package rxe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// maxMcastQPAttach is the most QPs one group takes, as rxe reports.
const maxMcastQPAttach = 56

// group is a multicast group some of the device's UD QPs are attached to:
// the link that receives its packets, joined on the device's link of the
// group's IP version, and the QPs that get a copy of each.
type group struct {
	addr    netip.Addr
	link    link.Link
	linkIdx int
	qps     []*qp // guarded by hw.mcastMu
}

// AttachMcast implements verbs.QPDriver (ibv_attach_mcast). The first QP
// of the device to attach joins the IP multicast group.
func (q *qp) AttachMcast(gid verbs.GID) error {
	const op = "ibv_attach_mcast"
	h := q.hw
	addr := gid.Addr()
	h.mcastMu.Lock()
	defer h.mcastMu.Unlock()
	q.mu.Lock()
	gone := q.destroyed // Destroy leaves the groups after setting it
	q.mu.Unlock()
	if gone {
		return verbs.Errorf(op, verbs.ErrClosed, "QP destroyed")
	}
	g := h.mcast[addr]
	if g == nil {
		idx := slices.IndexFunc(h.links, func(l link.Link) bool { return l.LocalAddr().Is4() == addr.Is4() })
		if idx < 0 {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, fmt.Sprintf("the device has no GID of the IP version of %v", addr))
		}
		j, ok := h.links[idx].(link.Joiner)
		if !ok {
			return verbs.Errorf(op, verbs.ErrNotSupported, "the device's link cannot join multicast groups")
		}
		l, err := j.JoinGroup(addr)
		if err != nil {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, err.Error())
		}
		g = &group{addr: addr, link: l, linkIdx: idx}
		h.mcast[addr] = g
		h.wg.Add(1)
		go h.recvGroup(g)
	}
	if slices.Contains(g.qps, q) {
		return nil // attached already: nothing changes, as in rxe
	}
	if len(g.qps) >= maxMcastQPAttach {
		return verbs.Errorf(op, verbs.ErrNoMemory, fmt.Sprintf("group %v has %d QPs attached, the most it takes", addr, maxMcastQPAttach))
	}
	g.qps = append(g.qps, q)
	return nil
}

// DetachMcast implements verbs.QPDriver (ibv_detach_mcast). The last QP
// of the device to detach leaves the IP multicast group.
func (q *qp) DetachMcast(gid verbs.GID) error {
	h := q.hw
	addr := gid.Addr()
	h.mcastMu.Lock()
	defer h.mcastMu.Unlock()
	g := h.mcast[addr]
	if g == nil || !slices.Contains(g.qps, q) {
		return verbs.Errorf("ibv_detach_mcast", verbs.ErrInvalidArgument, fmt.Sprintf("QP %#x is not attached to %v", q.num, addr))
	}
	h.detach(g, q)
	return nil
}

// detach takes q out of g, and the device out of the group if q was the
// last (h.mcastMu held).
func (h *hw) detach(g *group, q *qp) {
	g.qps = slices.DeleteFunc(g.qps, func(x *qp) bool { return x == q })
	if len(g.qps) == 0 {
		delete(h.mcast, g.addr)
		g.link.Close() // ends recvGroup
	}
}

// leaveAll detaches a QP being destroyed from every group.
func (h *hw) leaveAll(q *qp) {
	h.mcastMu.Lock()
	defer h.mcastMu.Unlock()
	for _, g := range h.mcast {
		if slices.Contains(g.qps, q) {
			h.detach(g, q)
		}
	}
}

// recvGroup reads the packets of a multicast group and hands a copy of
// each to every QP attached.
func (h *hw) recvGroup(g *group) {
	defer h.wg.Done()
	batch := make([]link.Packet, recvBatch)
	for j := range batch {
		batch[j].Buf = h.getBuf()
	}
	defer func() {
		for j := range batch {
			h.putBuf(batch[j].Buf)
		}
	}()
	var qps []*qp
	for {
		n, err := g.link.Recv(batch)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		h.mcastMu.Lock()
		qps = append(qps[:0], g.qps...)
		h.mcastMu.Unlock()
		for j := 0; j < n; j++ {
			p := &batch[j]
			if binary.BigEndian.Uint32(p.Buf[4:8])&0xffffff != multicastQPN {
				continue // to a group, a packet must name the multicast QPN
			}
			for _, q := range qps {
				b := h.getBuf()
				b = b[:copy(b[:cap(b)], p.Buf)]
				if !q.deliver(inPacket{buf: b, src: p.Addr, dst: g.addr, tclass: p.TClass, hop: p.HopLimit, link: uint8(g.linkIdx)}, true) {
					h.putBuf(b)
				}
			}
		}
		for j := 0; j < n; j++ {
			batch[j].Buf = batch[j].Buf[:cap(batch[j].Buf)]
		}
	}
}
