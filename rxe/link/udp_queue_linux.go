package link

import (
	"net"
	"sync/atomic"
)

// The UDP link's send queue. Send never waits for the kernel: what the
// socket has no room for (EAGAIN, its send buffer full of packets the
// network has not taken yet) is copied into the queue, in order, and the
// link's drainer goroutine sends it as room comes, waiting in the
// runtime's poller. While anything is queued, Send queues everything
// behind it, so that packets leave in the order they were given. The
// device that owns the link learns through SendQueue when it should stop
// building requests, and when it may go on.
//
// Over loopback the kernel never pushes back (a datagram's buffer is
// freed as it is delivered); over a NIC it does while the socket's sent
// packets wait for the NIC's queue. (A full queue discipline is another
// matter: the kernel drops the packet, and reports ENOBUFS, a send error.)
// Close drops what is still queued, as a NIC reset would.

var _ SendQueue = (*UDP)(nil)

// maxQueued is the most bytes the send queue holds. A packet that would
// take it past that is dropped and counted in Stats.Dropped: the network
// lost it, and RC's retransmission recovers it. A device keeps below it
// by stopping its QPs' requests and READ responses while anything is
// queued: each QP looks again after every out batch (rxe/room.go), so
// what reaches the queue after it fills is about a batch per QP then
// running, and acknowledgements.
const maxQueued = DefaultSocketBuffer

// sendQueue holds the packets Send could not hand to the socket.
type sendQueue struct {
	pkts  []Packet // waiting, oldest first, from head; guarded by sendMu
	head  int
	free  [][]byte // buffers of sent packets, for the next copies
	bytes atomic.Int64
	kick  chan struct{} // has the drainer look at the queue (capacity 1)
	empty atomic.Pointer[func()]
}

// transmit implements Send: at once what the socket takes, the rest
// through the queue.
func (u *UDP) transmit(pkts []Packet) error {
	u.sendMu.Lock()
	defer u.sendMu.Unlock()
	if u.queue.head < len(u.queue.pkts) {
		return u.enqueue(pkts, 0)
	}
	rest, checked, err := u.send(&u.sender, pkts)
	if rest < len(pkts) {
		if qerr := u.enqueue(pkts[rest:], checked-rest); err == nil {
			err = qerr
		}
	}
	return err
}

// enqueue copies pkts into the queue and wakes the drainer (sendMu held).
// Packets before index checked were checked by send: the bad ones among
// them are skipped without being counted again. It returns the first
// error of the others.
func (u *UDP) enqueue(pkts []Packet, checked int) error {
	q := &u.queue
	var firstErr error
	for i := range pkts {
		p := &pkts[i]
		if _, err := u.peer(p); err != nil {
			if i >= checked {
				u.stats.sendErrors.Add(1)
				if firstErr == nil {
					firstErr = err
				}
			}
			continue
		}
		if q.bytes.Load()+int64(len(p.Buf)) > maxQueued {
			u.stats.dropped.Add(1)
			continue
		}
		var b []byte
		if n := len(q.free); n > 0 && cap(q.free[n-1]) >= len(p.Buf) {
			b, q.free = q.free[n-1][:0], q.free[:n-1]
		} else {
			b = make([]byte, 0, max(len(p.Buf), 4096+128))
		}
		q.pkts = append(q.pkts, Packet{Buf: append(b, p.Buf...), Addr: p.Addr, TClass: p.TClass, HopLimit: p.HopLimit})
		q.bytes.Add(int64(len(p.Buf)))
		u.stats.queued.Add(1)
	}
	if q.head < len(q.pkts) {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	return firstErr
}

// startDrainer starts the goroutine that sends the queue. Close stops it.
func (u *UDP) startDrainer() {
	u.queue.kick = make(chan struct{}, 1)
	u.reporter.Add(1)
	go func() {
		defer u.reporter.Done()
		for {
			select {
			case <-u.queue.kick:
			case <-u.done:
				return
			}
			if !u.drain() {
				return
			}
		}
	}()
}

// drain sends the queue until it is empty, a batch at a time, waiting for
// room as it goes; false once the link is closed. Send appends behind the
// batch being sent meanwhile, and the batch leaves the queue only once
// sent, so that Send keeps queueing until everything before it is gone.
func (u *UDP) drain() bool {
	q := &u.queue
	for {
		u.sendMu.Lock()
		batch := q.pkts[q.head:min(len(q.pkts), q.head+batchSize)]
		u.sendMu.Unlock()
		if len(batch) == 0 {
			return true
		}
		if _, _, err := u.send(&u.drainer, batch); err == net.ErrClosed {
			return false
		}
		n := 0
		for _, p := range batch {
			n += len(p.Buf)
		}
		u.sendMu.Lock()
		for i := range batch {
			p := &q.pkts[q.head+i]
			q.free = append(q.free, p.Buf)
			*p = Packet{}
		}
		q.head += len(batch)
		emptied := q.head == len(q.pkts)
		switch {
		case emptied:
			q.pkts, q.head = q.pkts[:0], 0
			if len(q.free) > 2*batchSize {
				clear(q.free[2*batchSize:])
				q.free = q.free[:2*batchSize] // keep a few; let a burst's go
			}
		case q.head >= batchSize && q.head > len(q.pkts)/2:
			// The queue has not emptied for a while: move what
			// waits to the front, so that the slice holds what
			// waits and not all that went meanwhile.
			n := copy(q.pkts, q.pkts[q.head:])
			clear(q.pkts[n:])
			q.pkts, q.head = q.pkts[:n], 0
		}
		q.bytes.Add(-int64(n))
		u.sendMu.Unlock()
		if emptied {
			if f := q.empty.Load(); f != nil {
				(*f)()
			}
		}
	}
}

// Queued implements SendQueue.
func (u *UDP) Queued() int { return int(u.queue.bytes.Load()) }

// OnQueueEmpty implements SendQueue.
func (u *UDP) OnQueueEmpty(f func()) {
	if f == nil {
		u.queue.empty.Store(nil)
		return
	}
	u.queue.empty.Store(&f)
}
