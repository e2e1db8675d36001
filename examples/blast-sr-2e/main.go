// Command blast-sr-2e is the OFA course's blast-sr-2e exercise (seed 003):
// where the ping-pongs wait for each message's answer, a blast streams
// SENDs one way, from client to server, with many in flight.
//
// The set-up is ping-sr-2e's (an event channel per ID, asynchronous CM
// calls each followed by our_await_cm_event, rdma_migrate_id to the
// agent's channel, the client's count and size in the connect info, a
// busy-polled CQ). What the blast changes is the operation: the agent
// registers a window of buffers (-w, default 16) and posts a receive on
// each before it accepts; as each receive completes it posts it again
// while more messages are due. The client registers as many buffers and
// keeps up to a window of SENDs in flight, one from each, posting the
// next as each completes. The connection asks for RNR retries without
// end, for the client may SEND into a buffer the agent has not posted
// again yet: the agent's side answers "receiver not ready" and the
// client's retries. At the end each side prints the throughput it saw.
//
// As in ping-sr-2e, a peer that goes away is not noticed (blast-sr-2).
//
// Usage:
//
//	blast-sr-2e server [-a address] [-p port] [-c count] [-s size] [-w window] [-P pause] [-V] [-v] [-t]
//	blast-sr-2e client -a server [-p port] [-c count] [-s size] [-w window] [-P pause] [-V] [-v] [-t]
//
// -c is the number of messages (default 1000), -s their size (default
// 4096 bytes); the server takes the client's. -V makes the client fill
// each message with a pattern of its number and the server check it.
//
//	go run ./examples/blast-sr-2e server &
//	go run ./examples/blast-sr-2e client -a 127.0.0.1 -c 10000 -s 65536
package main

import (
	"github.com/rdmago/rdmago/examples/internal/course"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
)

// lesson is what this program does that ping-sr-0 does not; the course's
// flow (course.Lesson.Run) runs it.
var lesson = course.Lesson{
	Name:         "blast-sr-2e",
	Kind:         course.Blast, // new: a window of SENDs one way
	ConnectInfo:  true,
	EventChannel: true,
	Await:        course.BusyPoll,
}

func main() { lesson.Run() }
