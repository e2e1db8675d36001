package swcq

import (
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// An armed CQ calls notify once per arming, outside its lock.
func TestNotifyOncePerArm(t *testing.T) {
	var cq *CQ
	calls := 0
	cq = New(4, func() {
		calls++
		cq.Len() // would deadlock if called under the CQ's lock
	})
	cq.Push(&verbs.WC{}, false)
	cq.ReqNotify(false)
	cq.Push(&verbs.WC{}, false)
	cq.Push(&verbs.WC{}, false)
	if calls != 1 {
		t.Errorf("notify called %d times, want 1", calls)
	}
}
