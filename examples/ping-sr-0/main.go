// Command ping-sr-0 is the first ping-pong of the OFA course in the seed
// notes (003, "ping-sr-0"): a client SENDs a ping, the server's agent
// receives it and SENDs it back as the pong, count times.
//
// What this lesson shows, and the problems the next lessons solve:
//
//   - SEND/RECV: the client registers a buffer to send the ping from and
//     one to receive the pong into; the agent one buffer for both.
//   - Every connection manager call is synchronous: no rdma_event_channel
//     is created, so rdma_resolve_addr, rdma_connect, rdma_accept ... each
//     return when they are done.
//   - Completions are busy-polled: no ibv_comp_channel, and ibv_poll_cq
//     does not block, so a waiting side burns a CPU (problem 3).
//   - Client and server each take count and size from their own options,
//     and they must agree (problem 1, ping-sr-1).
//   - A peer that goes away is never noticed: the other side polls for
//     ever (problem 2, ping-sr-2e and ping-sr-2).
//
// The flow, with the course's functions and the calls each makes:
//
//	client main            our_create_id (rdma_create_id with no channel),
//	                       our_client_bind (getaddrinfo, rdma_resolve_addr,
//	                       rdma_resolve_route), our_setup_qp (ibv_alloc_pd,
//	                       ibv_create_cq, rdma_create_qp),
//	                       our_setup_client_buffers (ibv_reg_mr x2),
//	                       our_client_connect (rdma_connect),
//	                       our_client_operation, our_disconnect
//	                       (rdma_disconnect), our_unsetup_buffers
//	                       (ibv_dereg_mr), our_unsetup_qp (rdma_destroy_qp,
//	                       ibv_destroy_cq, ibv_dealloc_pd), our_destroy_id
//	                       (rdma_destroy_id)
//	server main (listener) our_create_id, our_listener_bind (rdma_bind_addr,
//	                       rdma_listen), our_await_cm_event for
//	                       CONNECT_REQUEST (here rdma_get_request: see
//	                       package course), our_agent, our_destroy_id
//	our_agent              our_migrate_id (the request's ID becomes the
//	                       agent's), our_setup_qp, our_setup_agent_buffers,
//	                       our_post_recv, our_agent_connect (rdma_accept),
//	                       our_agent_operation, our_disconnect, tear-down
//	our_*_operation        ibv_post_recv, ibv_post_send, our_await_completion
//	                       (ibv_poll_cq in a loop) for each message
//
// Usage:
//
//	ping-sr-0 server [-a address] [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//	ping-sr-0 client -a server [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//
// -c is the number of round trips (default 10), -s the bytes per message
// (default 100), -p the port (default 7471); -P pauses before each
// message, -V checks every pong against its ping, -v prints a line per
// round trip and -t traces every verb on stderr. The server serves one
// client and exits; both print how long the round trips took.
//
// rdmago's software RDMA device is shared by every process on the host, as
// Linux Soft-RoCE's is, so server and client run side by side on
// loopback:
//
//	go run ./examples/ping-sr-0 server &
//	go run ./examples/ping-sr-0 client -a 127.0.0.1 -c 1000
package main

import (
	"github.com/rdmago/rdmago/examples/internal/course"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
)

// lesson is ping-sr-0, the base the other lessons change; the course's
// flow (course.Lesson.Run) runs it.
var lesson = course.Lesson{
	Name:  "ping-sr-0",
	Kind:  course.PingPong,
	Await: course.BusyPoll, // ibv_poll_cq in a loop: no completion channel
	// No event channel: every connection manager call is synchronous.
}

func main() { lesson.Run() }
