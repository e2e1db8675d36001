// Package linktest holds links for tests of the software device and what
// runs on it.
package linktest

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/rdmago/rdmago/rxe/link"
)

// Shut is a link whose network has no room while shut: a link.SendQueue
// whose Send keeps the packets, as the UDP link does when its socket's
// buffer is full, until Open sends them on and says the queue emptied.
type Shut struct {
	link.Link
	mu    sync.Mutex
	shut  bool
	q     []link.Packet
	bytes atomic.Int64
	empty atomic.Pointer[func()]
}

var _ link.SendQueue = (*Shut)(nil)

// NewShut wraps l, open.
func NewShut(l link.Link) *Shut { return &Shut{Link: l} }

// Shut makes the network have no room from now on.
func (l *Shut) Shut() {
	l.mu.Lock()
	l.shut = true
	l.mu.Unlock()
}

// Send implements link.Link: the packets go on while the link is open and
// nothing is queued, and are queued otherwise.
func (l *Shut) Send(pkts []link.Packet) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.shut && len(l.q) == 0 {
		return l.Link.Send(pkts)
	}
	for _, p := range pkts {
		l.q = append(l.q, link.Packet{Buf: bytes.Clone(p.Buf), Addr: p.Addr})
		l.bytes.Add(int64(len(p.Buf)))
	}
	return nil
}

// Queued implements link.SendQueue.
func (l *Shut) Queued() int { return int(l.bytes.Load()) }

// OnQueueEmpty implements link.SendQueue.
func (l *Shut) OnQueueEmpty(f func()) { l.empty.Store(&f) }

// Queue returns the packets queued.
func (l *Shut) Queue() []link.Packet {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]link.Packet(nil), l.q...)
}

// Open sends the queue on, lets later packets straight through, says the
// queue emptied, and returns how many packets were queued.
func (l *Shut) Open() int {
	l.mu.Lock()
	q := l.q
	l.q, l.shut = nil, false
	l.Link.Send(q)
	l.bytes.Store(0)
	l.mu.Unlock()
	if f := l.empty.Load(); f != nil {
		(*f)()
	}
	return len(q)
}
