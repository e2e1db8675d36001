// Command ping-sr-2e is the OFA course's ping-sr-2e (seed 003): ping-sr-1
// with an explicit rdma_event_channel, the first step towards the second
// problem, a peer that goes away.
//
// What this lesson changes from ping-sr-1: the client, the listener and
// the agent each create an event channel (rdma_create_event_channel) and
// their IDs on it, which makes the connection manager calls asynchronous:
// rdma_resolve_addr, rdma_resolve_route, rdma_connect, rdma_accept and
// rdma_disconnect start the operation and return, and its outcome comes
// as an event. Each call is followed by our_await_cm_event, which blocks in
// rdma_get_cm_event until the event comes and checks that it is the one
// expected (ADDR_RESOLVED, ROUTE_RESOLVED, ESTABLISHED, DISCONNECTED).
// The listener's CONNECT_REQUEST comes on its channel; the agent moves
// the request's ID onto a channel of its own (rdma_migrate_id), so that
// each waits only for its own events.
//
// The second problem is not solved yet: the events are only looked at
// between the steps, while the ping-pong busy-polls its CQ as in
// ping-sr-0, so a peer that disconnects or dies mid-run is still not
// noticed (ping-sr-2 watches the channel while it polls).
//
// The flow, with the course's functions and the calls each makes:
//
//	client main            rdma_create_event_channel, our_create_id
//	                       (rdma_create_id on it), our_client_bind
//	                       (rdma_resolve_addr, await ADDR_RESOLVED,
//	                       rdma_resolve_route, await ROUTE_RESOLVED),
//	                       our_setup_qp, our_setup_client_buffers,
//	                       our_client_connect (rdma_connect with the connect
//	                       info, await ESTABLISHED), our_client_operation,
//	                       our_disconnect (rdma_disconnect, await
//	                       DISCONNECTED), tear-down, rdma_destroy_event_channel
//	server main (listener) rdma_create_event_channel, our_create_id,
//	                       our_listener_bind, our_await_cm_event
//	                       (CONNECT_REQUEST, with the connect info), our_agent
//	our_agent              our_migrate_id (rdma_create_event_channel,
//	                       rdma_migrate_id, the connect info), our_setup_qp,
//	                       our_setup_agent_buffers, our_post_recv,
//	                       our_agent_connect (rdma_accept, await
//	                       ESTABLISHED), our_agent_operation,
//	                       our_disconnect, tear-down
//
// Usage (the flags are ping-sr-0's; the server takes the client's -c and -s):
//
//	ping-sr-2e server [-a address] [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//	ping-sr-2e client -a server [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//
//	go run ./examples/ping-sr-2e server &
//	go run ./examples/ping-sr-2e client -a 127.0.0.1 -c 1000 -t
package main

import (
	"github.com/rdmago/rdmago/examples/internal/course"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
)

// lesson is what this program does that ping-sr-0 does not; the course's
// flow (course.Lesson.Run) runs it.
var lesson = course.Lesson{
	Name:         "ping-sr-2e",
	Kind:         course.PingPong,
	ConnectInfo:  true,
	EventChannel: true, // new: asynchronous CM calls, awaited; rdma_migrate_id
	Await:        course.BusyPoll,
}

func main() { lesson.Run() }
