package fabric

import (
	"errors"
	"testing"
)

// The queue answers each read by what it holds, whatever came and went
// before: the lock-free look for an empty queue must not miss an entry,
// an error entry or the close.
func TestQueueTakeSeesEveryChange(t *testing.T) {
	q := newQueue[int, string]()
	buf := make([]int, 4)
	take := func(wantN int, wantErr error, when string) {
		t.Helper()
		n, err := q.take("take", buf)
		if n != wantN || !errors.Is(err, wantErr) && err != wantErr {
			t.Fatalf("%s: take = %d, %v; want %d, %v", when, n, err, wantN, wantErr)
		}
	}
	take(0, ErrAgain, "new")
	q.push(1)
	q.push(2)
	take(2, nil, "after two pushes")
	take(0, ErrAgain, "emptied")
	q.push(3)
	q.pushErr("bad")
	take(0, ErrAvail, "an error entry waiting")
	if e, err := q.takeErr(); e != "bad" || err != nil {
		t.Fatalf("takeErr = %q, %v", e, err)
	}
	take(1, nil, "the entry behind the error")
	take(0, ErrAgain, "emptied again")
	q.close()
	take(0, ErrBadFD, "closed")
}
