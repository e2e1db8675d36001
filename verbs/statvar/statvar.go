// Package statvar publishes the counters of the program's RDMA devices
// with expvar, for long-running programs: import it for its side effect,
//
//	import _ "github.com/rdmago/rdmago/verbs/statvar"
//
// and the variable "rdma" of /debug/vars (expvar's handler) holds, for
// each device that verbs.Devices lists and that keeps counters, the
// counters `rdma statistic` shows for Linux's Soft-RoCE device:
//
//	"rdma": {"rxe_lo": {"sent_pkts": 2004, "rcvd_pkts": 2004, ...}}
package statvar

import (
	"expvar"

	"github.com/rdmago/rdmago/verbs"
)

// Name is the expvar variable the counters are published under.
const Name = "rdma"

func init() { expvar.Publish(Name, expvar.Func(Snapshot)) }

// Snapshot returns the counters of every device that keeps them, by
// device name and counter name.
func Snapshot() any {
	out := map[string]map[string]uint64{}
	devs, err := verbs.Devices()
	if err != nil {
		return out
	}
	for _, d := range devs {
		if c, err := d.QueryCounters(); err == nil {
			out[d.Name()] = c.Map()
		}
	}
	return out
}
