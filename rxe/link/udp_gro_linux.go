package link

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// With GRO, each recvmmsg reads up to groBuffers datagrams, each into its own
// scratch buffer of groBufSize bytes: room for the largest UDP payload, which
// bounds what the kernel coalesces.
const (
	groBuffers = 8
	groBufSize = 64 << 10
)

// groDatagram is a datagram read with GRO whose packets are being handed out.
type groDatagram struct {
	buf         []byte // the packets not handed out yet, in the scratch buffer
	seg         int    // the packet size; the last packet may be shorter
	from        netip.AddrPort
	tclass, hop uint8
}

// recvGRO implements Recv on a socket with UDP_GRO on. Called with recvMu
// held.
//
// The kernel hands up a run of packets it has coalesced (on loopback, a GSO
// send stays whole) as one datagram with a UDP_GRO control message giving
// the packet size; a datagram without one is a single packet. recvGRO reads
// a few datagrams per recvmmsg into the scratch buffers, cuts each into its
// packets, checks each packet's ICRC (the k-th packet of a GSO send carries
// IPv4 ID k, which the blind-ID check takes in its stride) and copies the
// good ones into the caller's buffers. Packets that do not fit in pkts stay
// in the scratch buffers, to be handed out by the next calls before the
// socket is read again.
func (u *UDP) recvGRO(pkts []Packet, wait bool) (int, error) {
	r := &u.receiver
	for i := range pkts {
		if cap(pkts[i].Buf) == 0 {
			return 0, noCapacity(i)
		}
	}
	for {
		if k := u.handOut(r, pkts); k > 0 {
			u.stats.received.Add(uint64(k))
			return k, nil
		}
		// Everything read is handed out or dropped: read again. Each
		// datagram holds at least one packet, so there is no point in
		// reading more than pkts can take.
		want := min(len(pkts), groBuffers)
		if err := r.readBatch(want, wait); err != nil {
			return 0, err
		}
		if r.got == 0 {
			return 0, nil // not waiting, found nothing
		}
		r.datagramsRead += uint64(r.got)
		r.next, r.ndgrams = 0, 0
		for i := range r.got {
			h := &r.hdrs[i]
			c := r.control(i)
			if c.hasDrops {
				u.stats.overflow.Store(uint64(c.drops))
			}
			n := int(h.Len)
			seg := c.seg
			if seg <= 0 || seg >= n {
				seg = n // a single packet
			}
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
				// Longer than any UDP payload, so not expected. Keep
				// the whole packets, if it holds several, and count
				// the cut one.
				u.stats.truncated.Add(1)
				if seg == n {
					continue
				}
				n -= n % seg
			}
			d := &r.dgrams[r.ndgrams]
			r.ndgrams++
			d.buf = r.scratch[i*groBufSize : i*groBufSize+n]
			d.seg = seg
			d.from = sockaddrAddrPort(&r.names[i])
			d.tclass, d.hop = c.tclass, c.hop
		}
	}
}

// handOut copies the good packets of the datagrams read but not yet handed
// out into pkts, in order, until pkts is full or nothing is left, and returns
// how many it copied. It drops and counts the bad ones.
//
// A packet longer than the buffer it would go to takes a later, longer
// buffer of pkts in exchange; if there is none, it waits for the next call,
// and is dropped only if it is longer than every buffer of pkts.
func (u *UDP) handOut(r *receiver, pkts []Packet) int {
	k := 0
	for r.next < r.ndgrams && k < len(pkts) {
		d := &r.dgrams[r.next]
		b := d.buf[:min(d.seg, len(d.buf))]
		if !fitBuffer(pkts[k:], len(b)) && k > 0 {
			break
		}
		d.buf = d.buf[len(b):]
		if len(d.buf) == 0 {
			d.buf = nil
			r.next++
		}
		p := &pkts[k]
		if len(b) > cap(p.Buf) {
			u.stats.truncated.Add(1)
			continue
		}
		p.Buf = p.Buf[:len(b)]
		copy(p.Buf, b)
		if !u.accept(p.Buf, d.from) {
			continue
		}
		p.Addr, p.TClass, p.HopLimit = d.from.Addr(), d.tclass, d.hop
		k++
	}
	return k
}

// fitBuffer makes sure pkts[0] has room for n bytes, exchanging its buffer
// with the first later one long enough if need be, and reports whether it
// found one.
func fitBuffer(pkts []Packet, n int) bool {
	if n <= cap(pkts[0].Buf) {
		return true
	}
	for j := 1; j < len(pkts); j++ {
		if n <= cap(pkts[j].Buf) {
			pkts[0].Buf, pkts[j].Buf = pkts[j].Buf, pkts[0].Buf
			return true
		}
	}
	return false
}
