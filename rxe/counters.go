package rxe

import (
	"sync/atomic"

	"github.com/rdmago/rdmago/verbs"
)

// counters are the statistics Linux's Soft-RoCE driver keeps (see
// verbs.Counter), per device and per QP.
type counters [verbs.NumCounters]atomic.Uint64

func (c *counters) snapshot() verbs.Counters {
	var out verbs.Counters
	for i := range c {
		out[i] = c[i].Load()
	}
	return out
}

// count adds n to counter k of the QP and of its device.
func (q *qp) count(k verbs.Counter, n uint64) {
	q.stats[k].Add(n)
	q.hw.dev.stats[k].Add(n)
}

// Counters implements verbs.CountersDriver for the device: its statistics
// since the program first opened it, kept across closes.
func (d *device) Counters() verbs.Counters { return d.stats.snapshot() }

// Counters implements verbs.CountersDriver for the QP.
func (q *qp) Counters() verbs.Counters { return q.stats.snapshot() }
