package rxe

import (
	"sync"

	"github.com/rdmago/rdmago/rxe/link"
)

// A QP's owner never waits for the network: a link that cannot take
// packets at once keeps them in its send queue (link.SendQueue) and sends
// them as room comes. So that the queue does not grow without bound,
// while it holds anything the QPs build no new requests and send no READ
// responses, looking again after each out batch; acknowledgements, which
// the peers' windows bound, still go, but for those that wait behind READ
// responses (responder.sendAck). The retransmit timer does not spend
// retries meanwhile (completer.noRoom). A QP that found no room waits to
// be kicked when the queue empties.

// linkRoom is the device's view of one link's send queue.
type linkRoom struct {
	q       link.SendQueue // nil: the link's Send waits for the network itself
	mu      sync.Mutex
	waiting map[*qp]struct{} // QPs to kick when the queue empties
}

// watchRooms finds the links with a send queue and has them say when it
// empties.
func (h *hw) watchRooms(links []link.Link) {
	h.rooms = make([]linkRoom, len(links))
	for i, l := range links {
		if sq, ok := l.(link.SendQueue); ok {
			r := &h.rooms[i]
			r.q = sq
			sq.OnQueueEmpty(r.emptied)
		}
	}
}

// sendRoom reports whether every link of the device has room for more
// packets now. If one has not, q is kicked when it has. (It looks at
// every link, not only those q sends on: a device has one or two, and a
// UD QP sends on any.)
func (h *hw) sendRoom(q *qp) bool {
	room := true
	for i := range h.rooms {
		r := &h.rooms[i]
		if r.q == nil || r.q.Queued() == 0 {
			continue
		}
		r.wait(q)
		// The queue may have emptied before q was listed: look again.
		if r.q.Queued() > 0 {
			room = false
		}
	}
	return room
}

// wait lists q to be kicked when the queue empties.
func (r *linkRoom) wait(q *qp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting == nil {
		r.waiting = make(map[*qp]struct{})
	}
	r.waiting[q] = struct{}{}
}

// emptied kicks the QPs waiting for room. The link calls it on its own
// goroutine.
func (r *linkRoom) emptied() {
	r.mu.Lock()
	qs := r.waiting
	r.waiting = nil
	r.mu.Unlock()
	for q := range qs {
		q.kick()
	}
}
