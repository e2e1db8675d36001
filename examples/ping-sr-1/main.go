// Command ping-sr-1 is the OFA course's second ping-pong (seed 003,
// "ping-sr-1"): ping-sr-0 with the answer to its first problem, a client
// and server that disagree on the count and size of the messages.
//
// What this lesson changes from ping-sr-0: the client tells the server its
// count and message size in the private data of its connection request,
// as struct our_connect_info (remote_limit and remote_data_size, 64 bits
// each, in network byte order: htonll); the listener copies the private
// data out of the CONNECT_REQUEST; the agent it starts takes both values
// (ntohll) in place of its own options, and reports them ("client count",
// "client data_size"). A request whose connect info is short, or asks
// for no messages or for messages larger than the server takes, is
// rejected (rdma_reject).
//
// The connection manager calls stay synchronous and the completions
// busy-polled, as in ping-sr-0: a peer that goes away is still never
// noticed, and a waiting side still burns a CPU.
//
// The flow, with the course's functions and the calls each makes:
//
//	client main            as ping-sr-0; our_client_connect fills
//	                       struct our_connect_info (htonll) and passes it
//	                       to rdma_connect as private data
//	server main (listener) as ping-sr-0; our_await_cm_event copies the
//	                       private data of CONNECT_REQUEST (here
//	                       rdma_get_request and the request's event)
//	our_agent              our_migrate_id sets limit and data_size from the
//	                       connect info (ntohll), then as ping-sr-0, or
//	                       rdma_reject for connect info it cannot serve
//
// Usage:
//
//	ping-sr-1 server [-a address] [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//	ping-sr-1 client -a server [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//
// The server's -c and -s are overridden by the client's. The flags are
// ping-sr-0's.
//
//	go run ./examples/ping-sr-1 server &
//	go run ./examples/ping-sr-1 client -a 127.0.0.1 -c 1000 -s 4096
package main

import (
	"github.com/rdmago/rdmago/examples/internal/course"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
)

// lesson is what this program does that ping-sr-0 does not; the course's
// flow (course.Lesson.Run) runs it.
var lesson = course.Lesson{
	Name:        "ping-sr-1",
	Kind:        course.PingPong,
	ConnectInfo: true, // new: count and size in the connection request
	Await:       course.BusyPoll,
}

func main() { lesson.Run() }
