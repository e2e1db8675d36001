// Command blast-sr-2 is the OFA course's blast-sr-2 (seed 003): the
// blast of blast-sr-2e on ping-sr-2's machinery, so that a peer that goes
// away mid-stream is noticed.
//
// As in blast-sr-2e, the client streams SENDs to the agent with up to a
// window of them in flight, the agent keeps a window of receives posted,
// and each side prints its throughput at the end. As in ping-sr-2, once
// the connection is ESTABLISHED a goroutine takes the CM events and
// records the latest, the busy poll returns ECONNRESET once the
// connection has left ESTABLISHED and nothing more can complete, and a
// keepalive (a zero-length RDMA WRITE after half a second without a
// completion) finds a peer that was killed.
//
// Usage (the flags are blast-sr-2e's):
//
//	blast-sr-2 server [-a address] [-p port] [-c count] [-s size] [-w window] [-P pause] [-V] [-v] [-t]
//	blast-sr-2 client -a server [-p port] [-c count] [-s size] [-w window] [-P pause] [-V] [-v] [-t]
//
//	go run ./examples/blast-sr-2 server &
//	go run ./examples/blast-sr-2 client -a 127.0.0.1 -c 10000 -s 65536 -w 32
package main

import (
	"github.com/rdmago/rdmago/examples/internal/course"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
)

// lesson is what this program does that ping-sr-0 does not; the course's
// flow (course.Lesson.Run) runs it.
var lesson = course.Lesson{
	Name:          "blast-sr-2",
	Kind:          course.Blast,
	ConnectInfo:   true,
	EventChannel:  true,
	CMEventThread: true,
	Keepalive:     true,
	Await:         course.BusyPollCM,
}

func main() { lesson.Run() }
