// Command ping-sr-2 is the OFA course's ping-sr-2 (seed 003): ping-sr-2e
// with the answer to the second problem, a peer that disconnects or dies
// while this side waits for a completion.
//
// What this lesson changes from ping-sr-2e: once the connection is
// ESTABLISHED, the client and the agent each start a thread — here a
// goroutine — that blocks in rdma_get_cm_event on the connection's channel
// and records the latest event in our_control, under a lock
// (our_create_cm_event_thread, our_cm_event_thread). our_await_completion
// still busy-polls the CQ, but between polls it looks at that record, and
// once the connection has left ESTABLISHED (DISCONNECTED) and nothing more
// can complete it returns ECONNRESET instead of polling for ever.
// our_await_cm_event no longer reads the channel itself: it waits until
// the goroutine has recorded the event it wants.
//
// A C program that is killed is disconnected by the kernel; rdmago's
// connection manager dies with the program, so a killed peer sends no
// disconnect request. To notice it too, the wait posts a keepalive (a
// zero-length RDMA WRITE) when it has seen no completion for half a
// second, and a peer that does not acknowledge it fails it within about
// 1.6 s (the ID's ACK timeout with 5 retries): also ECONNRESET. A side
// interrupted with SIGINT or SIGTERM disconnects before it exits, so its
// peer sees DISCONNECTED at once.
//
// The busy poll still burns a CPU (problem 3, ping-sr-3).
//
// The flow is ping-sr-2e's, with our_create_cm_event_thread after
// our_client_connect and our_agent_connect, and the thread stopped in
// our_destroy_id.
//
// Usage (the flags are ping-sr-0's; the server takes the client's -c and -s):
//
//	ping-sr-2 server [-a address] [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//	ping-sr-2 client -a server [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//
//	go run ./examples/ping-sr-2 server &
//	go run ./examples/ping-sr-2 client -a 127.0.0.1 -c 100000
//
// and interrupt or kill either side mid-run: the other reports it and
// exits with status 1.
package main

import (
	"github.com/rdmago/rdmago/examples/internal/course"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
)

// lesson is what this program does that ping-sr-0 does not; the course's
// flow (course.Lesson.Run) runs it.
var lesson = course.Lesson{
	Name:          "ping-sr-2",
	Kind:          course.PingPong,
	ConnectInfo:   true,
	EventChannel:  true,
	CMEventThread: true,              // new: a goroutine records the CM events
	Keepalive:     true,              // for a peer killed without a disconnect
	Await:         course.BusyPollCM, // new: the busy poll looks at the record
}

func main() { lesson.Run() }
