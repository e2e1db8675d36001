package rxm

import (
	"context"
	"time"

	"github.com/rdmago/rdmago/fabric"
)

// What an RDM endpoint of rxm's kind does the same over any MSG
// provider: matching messages with receives, and pumping its
// connections' events and completions.

// Recv is a receive the program posted (fi_recv, fi_trecv).
type Recv struct {
	Buf         []byte
	Desc        any
	Src         fabric.Addr // AddrNotAvail: from anyone
	Tagged      bool
	Tag, Ignore uint64
	Ctx         any
}

// Msg is a message that came over connection Conn of the provider's
// type: whole (Body, of Size bytes) or announced by a rendezvous (Rndv).
type Msg[C any] struct {
	Conn   C
	From   fabric.Addr // the sender's AV handle, or AddrNotAvail
	Tagged bool
	Tag    uint64
	Data   uint64 // remote CQ data, with HasCQ
	HasCQ  bool
	Body   []byte
	Rndv   []IOV
	Size   uint64
	MsgID  uint64
}

// Flags are the completion flags of a receive that takes m.
func (m *Msg[C]) Flags() uint64 {
	f := fabric.CompRecv | fabric.CompMsg
	if m.Tagged {
		f = fabric.CompRecv | fabric.CompTagged
	}
	if m.HasCQ {
		f |= fabric.CompRemoteCQData
	}
	return f
}

func (u *Recv) matches(tagged bool, tag uint64, from fabric.Addr) bool {
	if u.Tagged != tagged || (u.Src != fabric.AddrNotAvail && u.Src != from) {
		return false
	}
	return !u.Tagged || (u.Tag^tag)&^u.Ignore == 0
}

// Queue holds the receives no message has come for, and the messages
// (unexpected) no receive was posted for, and matches each newcomer with
// the oldest of the other kind it matches, as rxm does.
type Queue[C any] struct {
	posted []Recv
	unexp  []Msg[C]
}

// MaxUnexpected is how many messages a Queue holds before Arrive refuses
// one: a peer far ahead of the program's receives.
const MaxUnexpected = 4096

// Arrive returns the receive m matches, taking it out; or holds m (with
// a copy of its body: the caller's buffer goes back to the connection)
// and returns ok false; or, when too many are held, returns full.
func (q *Queue[C]) Arrive(m Msg[C]) (u Recv, ok, full bool) {
	for i := range q.posted {
		if q.posted[i].matches(m.Tagged, m.Tag, m.From) {
			u = q.posted[i]
			q.posted = append(q.posted[:i:i], q.posted[i+1:]...)
			return u, true, false
		}
	}
	if len(q.unexp) >= MaxUnexpected {
		return Recv{}, false, true
	}
	if m.Body != nil {
		m.Body = append([]byte(nil), m.Body...)
	}
	q.unexp = append(q.unexp, m)
	return Recv{}, false, false
}

// Post returns the oldest held message u matches, taking it out; or
// keeps u and returns ok false.
func (q *Queue[C]) Post(u Recv) (m Msg[C], ok bool) {
	for i := range q.unexp {
		if u.matches(q.unexp[i].Tagged, q.unexp[i].Tag, q.unexp[i].From) {
			m = q.unexp[i]
			q.unexp = append(q.unexp[:i:i], q.unexp[i+1:]...)
			return m, true
		}
	}
	q.posted = append(q.posted, u)
	return m, false
}

// Held is how many messages wait for a receive.
func (q *Queue[C]) Held() int { return len(q.unexp) }

// Unexpected returns the messages waiting for a receive (for tests).
func (q *Queue[C]) Unexpected() []Msg[C] { return q.unexp }

// Drain takes out every posted receive (the endpoint is closing).
func (q *Queue[C]) Drain() []Recv {
	p := q.posted
	q.posted, q.unexp = nil, nil
	return p
}

// Handlers are what an RDM endpoint does with its connections' events,
// completions and their errors.
type Handlers struct {
	Event     func(fabric.EQEntry)
	EventErr  func(fabric.EQErrEntry)
	Comp      func(fabric.CQEntry)
	CompErr   func(fabric.CQErrEntry)
	Completed func() // after a pass that found completions, or nil
}

// Pump takes what the connections' event queue and completion queue
// hold and hands each to h, until both are empty.
func Pump(eq *fabric.EQ, cq *fabric.CQ, h *Handlers) {
	for {
		ev, err := eq.Read()
		if err == fabric.ErrAvail {
			ee, _ := eq.ReadErr()
			h.EventErr(ee)
			continue
		}
		if err != nil {
			break
		}
		h.Event(ev)
	}
	var buf [16]fabric.CQEntry
	for {
		n, err := cq.Read(buf[:])
		if err == fabric.ErrAvail {
			ee, _ := cq.ReadErr()
			h.CompErr(ee)
			continue
		}
		if n == 0 {
			return
		}
		for _, e := range buf[:n] {
			h.Comp(e)
		}
	}
}

// Loop calls pump whenever the event or completion queue has something,
// until ctx is done: the RDM endpoint's progress while the program does
// not poll. pump reports whether it ran; while someone else holds the
// endpoint (a program's call, its own poll) Loop backs off rather than
// spin on the queues that person will empty.
func Loop(ctx context.Context, eq *fabric.EQ, cq *fabric.CQ, pump func() bool) {
	for ctx.Err() == nil {
		if !pump() {
			select {
			case <-time.After(100 * time.Microsecond):
			case <-ctx.Done():
			}
			continue
		}
		wctx, stop := context.WithCancel(ctx)
		go func() {
			eq.Wait(wctx)
			stop()
		}()
		cq.Wait(wctx)
		stop()
	}
}
