//go:build !linux

package link

import (
	"net"
	"net/netip"
	"syscall"
)

// sender and receiver hold no batch state where there is no sendmmsg and
// recvmmsg: packets go one per system call.
type (
	sender   struct{}
	receiver struct{}
)

// setMulticastInterface leaves the choice of interface for multicast to
// the routing table here.
func setMulticastInterface(*net.UDPConn, netip.Addr) {}

// controlSocket has nothing to set before binding here; init sizes the
// buffers portably.
func controlSocket(syscall.RawConn, bool, *UDPOptions) error { return nil }

// init sizes the socket buffers of a new link. GSO and GRO are not
// available.
func (u *UDP) init(opt *UDPOptions, _, _ bool) error {
	u.conn.SetReadBuffer(opt.RecvBuffer)
	u.conn.SetWriteBuffer(opt.SendBuffer)
	return nil
}

// sendQueue is empty here: Send waits for the network.
type sendQueue struct{}

// transmit implements Send, one packet per system call.
func (u *UDP) transmit(pkts []Packet) error {
	u.sendMu.Lock()
	defer u.sendMu.Unlock()
	var firstErr error
	for i := range pkts {
		p := &pkts[i]
		dst, err := u.peer(p)
		if err == nil {
			ph := pseudoHeader(u.local, dst, u.srcPort, u.port, 0)
			ph.SetICRC(p.Buf)
			if dst.IsLinkLocalUnicast() && dst.Zone() == "" {
				dst = dst.WithZone(u.local.Zone())
			}
			_, err = u.conn.WriteToUDPAddrPort(p.Buf, netip.AddrPortFrom(dst, u.port))
			if err != nil {
				if err = closedError(err); err == net.ErrClosed {
					return err
				}
			}
		}
		if err != nil {
			u.stats.sendErrors.Add(1)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		u.stats.sent.Add(1)
	}
	return firstErr
}

// recv implements Recv, one packet per call. Called with recvMu held.
func (u *UDP) recv(pkts []Packet) (int, error) {
	p := &pkts[0]
	for {
		n, from, err := u.conn.ReadFromUDPAddrPort(p.Buf[:cap(p.Buf)])
		if err != nil {
			return 0, closedError(err)
		}
		from = netip.AddrPortFrom(from.Addr().Unmap().WithZone(""), from.Port())
		p.Buf = p.Buf[:n]
		if u.accept(p.Buf, from) {
			p.Addr, p.TClass, p.HopLimit = from.Addr(), 0, 0
			u.stats.received.Add(1)
			return 1, nil
		}
	}
}
