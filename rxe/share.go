package rxe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// A device on the host's addresses is shared between processes, as
// Linux's Soft-RoCE device is: every process that opens rxe_lo uses
// 127.0.0.1:4791 at once. Each process takes an owner number on the
// device's addresses (the same on all of them), gives its QPs numbers in
// that owner's range (owner<<16 | 0x11 to owner<<16 | 0xffff), and the
// process that holds the UDP port hands each packet to the process that
// owns its destination QP (link.Shared). Packets for QP1, the general
// services QP every process's connection manager has, are routed as the
// kernel's MAD layer routes them to its agents: a CM message that answers
// one of ours carries our communication ID, whose upper 8 bits are the
// owner (the connection manager asks the device for them, CommIDOwner); a
// connection request goes to the process that listens on its service ID
// (ClaimService). What no connection manager would answer, the devices
// answer as the kernel's IB CM does (cmanswer.go): a request nobody
// listens for, in a process without QP1, and, at the leader, a REP or
// DREQ for an owner number no process holds any more.

// maxOwners is the number of processes that can share an address.
const maxOwners = 256

// shareAddrs joins the processes using addrs at port under the first owner
// number free on all of them.
func shareAddrs(addrs []netip.Addr, port uint16) ([]link.Link, uint8, error) {
	for owner := 0; owner < maxOwners; owner++ {
		var links []link.Link
		var err error
		for _, a := range addrs {
			var l *link.Shared
			l, err = link.ListenShared(netip.AddrPortFrom(a, port), uint8(owner), link.UDPOptions{})
			if err != nil {
				break
			}
			links = append(links, l)
		}
		if err == nil {
			return links, uint8(owner), nil
		}
		for _, l := range links {
			l.Close()
		}
		if !errors.Is(err, link.ErrOwnerTaken) {
			return nil, 0, err
		}
	}
	return nil, 0, fmt.Errorf("%d processes share the device's addresses already", maxOwners)
}

// MAD layout, for routing QP1 packets: the MAD follows the BTH and DETH;
// its header holds the management class at byte 1 and the attribute ID at
// bytes 16-17; the CM message's fields start at byte 24.
const (
	madOffset      = 12 + 8
	madHeaderLen   = 24
	mgmtClassCM    = 0x07
	cmAttrREQ      = 0x0010
	cmAttrSIDRREQ  = 0x0017
	cmAttrSIDRREP  = 0x0018
	cmServiceIDOff = 8 // REQ and SIDR_REQ: the service ID
	cmRemoteIDOff  = 4 // MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR: the receiver's communication ID
)

// serviceOwners finds the process that claimed a service (link.Shared).
type serviceOwners interface {
	ServiceOwner(id uint64) (owner uint8, ok, unknown bool)
}

// route returns the owner of a packet the leader of a shared address
// received; ok is false for a packet to drop (a connection request whose
// listener did not say in time whether it is there).
func (h *hw) route(sh serviceOwners, pkt []byte) (owner uint8, ok bool) {
	qpn := binary.BigEndian.Uint32(pkt[4:8]) & 0xffffff
	if qpn != gsiQPN {
		return uint8(qpn >> 16), true
	}
	cm := madOffset + madHeaderLen
	if len(pkt) < cm+16 || pkt[madOffset+1] != mgmtClassCM {
		return h.owner, true
	}
	switch attr := binary.BigEndian.Uint16(pkt[madOffset+16:]); attr {
	case cmAttrREQ, cmAttrSIDRREQ:
		o, claimed, unknown := sh.ServiceOwner(binary.BigEndian.Uint64(pkt[cm+cmServiceIDOff:]))
		switch {
		case unknown:
			return 0, false // its sender asks again
		case claimed:
			return o, true
		}
		return h.owner, true // nobody listens: our connection manager refuses it, if we have one
	case cmAttrSIDRREP:
		return pkt[cm], true // the request ID is ours
	default:
		return pkt[cm+cmRemoteIDOff], true
	}
}

// CommIDOwner returns the value the upper 8 bits of the connection
// manager's communication IDs (and SIDR request IDs) must have on this
// device, so that CM messages answering them reach this process when the
// device is shared; ok is false if the device is not open.
func (d *device) CommIDOwner() (owner uint8, ok bool) {
	d.mu.Lock()
	h := d.hw
	d.mu.Unlock()
	if h == nil || h.up() != nil {
		return 0, false
	}
	return h.owner, true
}

// ClaimService claims connection manager service id on the device's
// address addr (every address if addr is unspecified), so that connection
// requests for it reach this process when the device is shared. If
// another process of the host has claimed it, the error is
// verbs.ErrAddrInUse, as rdma_listen fails with EADDRINUSE on a port
// another process listens on.
func (d *device) ClaimService(addr netip.Addr, id uint64) (release func(), err error) {
	d.mu.Lock()
	h := d.hw
	d.mu.Unlock()
	if h == nil {
		return nil, verbs.Errorf("rdma_listen", verbs.ErrNoDevice, "the device is not open")
	}
	if err := h.up(); err != nil {
		return nil, err
	}
	var releases []func()
	undo := func() {
		for _, r := range releases {
			r()
		}
	}
	for _, l := range h.links {
		sh, ok := l.(*link.Shared)
		if !ok || addr.IsValid() && !addr.IsUnspecified() && l.LocalAddr().WithZone("") != addr.Unmap().WithZone("") {
			continue
		}
		r, err := sh.RegisterService(id)
		if err != nil {
			undo()
			if errors.Is(err, link.ErrServiceTaken) {
				who := "another process of this host"
				if strings.Contains(err.Error(), "another user's") {
					who = "another user's process"
				}
				return nil, verbs.Errorf("rdma_listen", verbs.ErrAddrInUse, fmt.Sprintf("%s listens on %s at %v", who, serviceName(id), l.LocalAddr()))
			}
			return nil, err
		}
		releases = append(releases, r)
	}
	return undo, nil
}

// serviceName names a connection manager service ID as rdma_cm's users
// know it: a port of a port space (the IBTA's IP service IDs are
// 0x0000000001 <port space> <port>), or the ID itself.
func serviceName(id uint64) string {
	spaces := map[uint64]string{0x0002: "IPoIB", 0x0106: "TCP", 0x0111: "UDP", 0x013f: "IB"}
	if ps, ok := spaces[id>>16&0xffff]; ok && id>>32 == 0 {
		return fmt.Sprintf("port %d of rdma_cm's %s port space (service %#x)", id&0xffff, ps, id)
	}
	return fmt.Sprintf("service %#x", id)
}

// unreachable hears from a link that a packet found nobody at dst (ICMP
// port, host or network unreachable). For a connection manager message,
// whose sender would otherwise resend it for a minute and more, it tells
// the connection manager at once (OnCMUnreachable).
func (h *hw) unreachable(dst netip.Addr, errno syscall.Errno, pkt []byte) {
	if len(pkt) < 8 || binary.BigEndian.Uint32(pkt[4:8])&0xffffff != gsiQPN {
		return
	}
	if fn := h.dev.cmUnreachable.Load(); fn != nil {
		(*fn)(dst, errno, pkt)
	}
}

// OnCMUnreachable sets the function the device calls when a packet its
// QP1 sent to dst found no RoCE device there (errno ECONNREFUSED), or no
// host or network (EHOSTUNREACH, ENETUNREACH); pkt holds the start of the
// packet, from its BTH. The connection manager sets it to fail a
// connection request at once instead of resending it into the void. A nil
// fn removes it.
func (d *device) OnCMUnreachable(fn func(dst netip.Addr, errno syscall.Errno, pkt []byte)) {
	if fn == nil {
		d.cmUnreachable.Store(nil)
		return
	}
	d.cmUnreachable.Store(&fn)
}

// OnQP1Receive sets the function the device calls each time QP1 has
// completed receives, holding none of its locks: on the receive loop that
// read the MADs, once it has let go of its link; or, when another
// goroutine ran QP1 (a CQ poller, a poster, QP1's own goroutine), on a
// goroutine started for it, since fn may post to QP1 or destroy it and
// must not wait behind the caller. The connection manager then handles
// its MADs at once, where otherwise a goroutine of its own would wake for
// each. A nil fn removes it.
func (d *device) OnQP1Receive(fn func()) {
	if fn == nil {
		d.qp1Received.Store(nil)
		return
	}
	d.qp1Received.Store(&fn)
}

// tellQP1 calls the OnQP1Receive function, if one is set.
func (d *device) tellQP1() {
	if fn := d.qp1Received.Load(); fn != nil {
		(*fn)()
	}
}

// tellQP1Later calls the OnQP1Receive function on a goroutine of its own.
func (d *device) tellQP1Later() {
	if fn := d.qp1Received.Load(); fn != nil {
		go (*fn)()
	}
}

// UDPPort returns the UDP port the device speaks RoCEv2 on.
func (d *device) UDPPort() uint16 { return d.cfg.Port }
