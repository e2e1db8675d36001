package rxe

import (
	"sync"

	"github.com/rdmago/rdmago/rxe/wire"
)

// Holding requests past a gap.
//
// A responder that finds a PSN missing NAKs it (PSN sequence error) and
// executes nothing after it until it comes. Linux rxe drops what arrives
// meanwhile, and the requester goes back to the missing PSN and sends
// everything after it again (go-back-N): a lost packet costs a window of
// resends, and every further loss in that window another round. This
// responder instead keeps the SEND and WRITE packets that come after the
// gap, up to holdSlots PSNs ahead, and once the missing packet arrives
// executes them in PSN order, exactly as if their resent copies had come
// at once, and acknowledges the last. Nothing else shows on the wire: the
// ACK covers PSNs the requester has sent (an ACK of later PSNs than the
// copy just sent is what any delayed ACK looks like), and the resends it
// overtakes are duplicates, acknowledged as ever. A requester that goes
// back fills every gap of its window in one pass instead of one pass per
// gap, and this device's requester skips what such an ACK covered rather
// than sending it again (requester.sendMore).
//
// READ and atomic requests are not held (their duplicates are replayed
// from the responder resources anyway), nor are packets of UC (which
// never goes back) or XRC.

// holdSlots is how far past the expected PSN the responder holds
// requests: a requester's window (maxUnackedPSN here, and
// RXE_MAX_UNACKED_PSNS in Linux rxe).
const holdSlots = maxUnackedPSN

// heldPool recycles the buffers held packets are copied into.
var heldPool = sync.Pool{New: func() any { return new([]byte) }}

// heldReq is a request packet kept past a gap: a copy of it, BTH to ICRC.
type heldReq struct {
	psn wire.PSN
	raw *[]byte // nil: the slot is free
}

// holdQueue is the responder's store of packets past a gap, one slot per
// PSN modulo its size. Its slots are made on first use: a QP that never
// sees a gap keeps none.
type holdQueue struct {
	slots []heldReq
	n     int // slots in use
}

// put keeps a copy of raw, the request of PSN psn, unless a copy of that
// PSN is already kept.
func (h *holdQueue) put(psn wire.PSN, raw []byte) {
	if h.slots == nil {
		h.slots = make([]heldReq, holdSlots)
	}
	s := &h.slots[uint32(psn)%holdSlots]
	if s.raw != nil {
		if s.psn == psn {
			return
		}
		// An older PSN's packet (the requester went back past it and
		// it was executed from the later copy): the new one replaces it.
		h.free(s)
	}
	b := heldPool.Get().(*[]byte)
	*b = append((*b)[:0], raw...)
	s.psn, s.raw = psn, b
	h.n++
}

// take returns the packet kept for psn, if any, and frees its slot; the
// caller gives the buffer back with release once done with it.
func (h *holdQueue) take(psn wire.PSN) *[]byte {
	if h.n == 0 {
		return nil
	}
	s := &h.slots[uint32(psn)%holdSlots]
	if s.raw == nil {
		return nil
	}
	b := s.raw
	ok := s.psn == psn
	s.raw = nil
	h.n--
	if !ok {
		// Another PSN's packet, which can no longer be the one next
		// expected after psn (it is at least a whole store behind or
		// ahead): dropped.
		release(b)
		return nil
	}
	return b
}

// free empties a slot in use.
func (h *holdQueue) free(s *heldReq) {
	release(s.raw)
	s.raw = nil
	h.n--
}

// reset drops every packet kept.
func (h *holdQueue) reset() {
	if h.n == 0 {
		return
	}
	for i := range h.slots {
		if h.slots[i].raw != nil {
			h.free(&h.slots[i])
		}
	}
}

// dropBefore frees the packets held for PSNs before psn: already
// executed, from a later copy.
func (h *holdQueue) dropBefore(psn wire.PSN) {
	if h.n == 0 {
		return
	}
	for i := range h.slots {
		if s := &h.slots[i]; s.raw != nil && s.psn.Diff(psn) < 0 {
			h.free(s)
		}
	}
}

// release gives a held packet's buffer back.
func release(b *[]byte) {
	if cap(*b) > 2*maxHeldLen {
		return // an outsize packet: let it go
	}
	heldPool.Put(b)
}

// maxHeldLen is the longest packet the store expects: a 4096-byte MTU's
// payload with the largest headers.
const maxHeldLen = 4096 + 64
