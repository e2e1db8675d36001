// Command rdmacm_client is the rdma_cm client walked through line by line
// in the seed notes (001), in Go: an event channel, an ID, address
// resolution, and an event loop that copies and acknowledges each event
// and hands it to on_event, whose handlers build the verbs context and QP,
// resolve the route, connect, exchange one message each way with
// rdmacm_server, and disconnect.
//
// The flow, with the librdmacm and libibverbs call each step makes:
//
//	main               getaddrinfo, rdma_create_event_channel,
//	                   rdma_create_id, rdma_resolve_addr, then
//	                   rdma_get_cm_event / copy / rdma_ack_cm_event /
//	                   on_event until on_disconnect says done,
//	                   rdma_destroy_event_channel
//	on_addr_resolved   build_context (ibv_alloc_pd,
//	                   ibv_create_comp_channel, ibv_create_cq,
//	                   ibv_req_notify_cq, the poller), build_qp_attr,
//	                   rdma_create_qp, register_memory (ibv_reg_mr),
//	                   post_receives (ibv_post_recv), rdma_resolve_route
//	on_route_resolved  rdma_connect
//	on_connection      ibv_post_send of "message from active/client side"
//	on_completion      prints what was received and sent; after both,
//	                   rdma_disconnect
//	on_disconnect      rdma_destroy_qp, ibv_dereg_mr, rdma_destroy_id
//
// Usage:
//
//	rdmacm_client [-b bind-address] [<server-address> <server-port>]
//
// The server defaults to 127.0.0.1 port 7471 (rdmacm_server's default
// port); -b picks the local address to connect from (default: the one the
// host routes from).
//
// rdmago's software RDMA device is shared by every process on the host, as
// Linux Soft-RoCE's is, so server and client run side by side on loopback:
//
//	go run ./examples/rdmacm_server &
//	go run ./examples/rdmacm_client 127.0.0.1 7471
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
	"github.com/rdmago/rdmago/verbs"
)

const (
	bufferSize  = 1024
	timeoutInMS = 500 // ms
)

var bind = flag.String("b", "", "local address to connect from")

// devContext is the seed's struct context: the verbs objects built on
// the device the connection resolved to.
type devContext struct {
	ctx         *verbs.Context
	pd          *verbs.PD
	cq          *verbs.CQ
	compChannel *verbs.CompChannel

	stopPoller context.CancelFunc // ends cq_poller_thread
	pollerDone chan struct{}
}

// connection is the seed's struct connection.
type connection struct {
	id *rdmacm.ID
	qp *verbs.QP

	recvMR *verbs.MR
	sendMR *verbs.MR

	recvRegion []byte
	sendRegion []byte

	numCompletions atomic.Int32
}

var sCtx *devContext

// The one connection: C puts its address in wr_id, which Go cannot turn
// back into a pointer; with a single connection wr_id is simply 1.
var theConn atomic.Pointer[connection]

func die(reason string) {
	fmt.Fprintln(os.Stderr, reason)
	os.Exit(1)
}

func testNZ(err error, what string) {
	if err != nil {
		die("error: " + what + " failed: " + err.Error())
	}
}

func main() {
	flag.Parse()
	host, port := "127.0.0.1", "7471"
	switch flag.NArg() {
	case 0:
	case 2:
		host, port = flag.Arg(0), flag.Arg(1)
	default:
		die("usage: rdmacm_client [-b bind-address] <server-address> <server-port>")
	}
	var src netip.AddrPort
	if *bind != "" {
		a, err := netip.ParseAddr(*bind)
		testNZ(err, "parsing -b")
		src = netip.AddrPortFrom(a, 0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	addr, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(host, port)) // getaddrinfo
	testNZ(err, "getaddrinfo")

	ec, err := rdmacm.CreateEventChannel() // rdma_create_event_channel
	testNZ(err, "rdma_create_event_channel")
	conn, err := rdmacm.CreateID(ec, nil, rdmacm.PSTCP) // rdma_create_id
	testNZ(err, "rdma_create_id")
	testNZ(conn.ResolveAddr(src, addr.AddrPort(), timeoutInMS*time.Millisecond), "rdma_resolve_addr") // rdma_resolve_addr

	for {
		event, err := ec.GetEvent(ctx) // rdma_get_cm_event
		if err != nil {
			break
		}
		eventCopy := *event // memcpy(&event_copy, event, sizeof(*event))
		event.Ack()         // rdma_ack_cm_event
		if onEvent(&eventCopy) {
			break
		}
	}

	ec.Close() // rdma_destroy_event_channel
}

func onEvent(event *rdmacm.Event) bool {
	switch event.Type {
	case rdmacm.EventAddrResolved:
		return onAddrResolved(event.ID)
	case rdmacm.EventRouteResolved:
		return onRouteResolved(event.ID)
	case rdmacm.EventEstablished:
		return onConnection(event.ID.Context())
	case rdmacm.EventDisconnected:
		return onDisconnect(event.ID)
	}
	msg := "on_event: unknown event " + event.Type.String() + "."
	if err := event.Err(); err != nil {
		msg += " (" + err.Error() + ")"
	}
	die(msg)
	return true
}

func onAddrResolved(id *rdmacm.ID) bool {
	fmt.Println("address resolved.")

	buildContext(id.Verbs())
	qpAttr := buildQPAttr()
	testNZ(id.CreateQP(sCtx.pd, &qpAttr), "rdma_create_qp") // rdma_create_qp

	conn := &connection{id: id, qp: id.QP()}
	id.SetContext(conn) // id->context = conn
	theConn.Store(conn)

	registerMemory(conn)
	postReceives(conn)

	testNZ(id.ResolveRoute(timeoutInMS*time.Millisecond), "rdma_resolve_route") // rdma_resolve_route
	return false
}

func onRouteResolved(id *rdmacm.ID) bool {
	fmt.Println("route resolved.")
	var cmParams rdmacm.ConnParam                 // memset(&cm_params, 0, sizeof(cm_params))
	testNZ(id.Connect(&cmParams), "rdma_connect") // rdma_connect
	return false
}

func onConnection(context any) bool {
	conn := context.(*connection)
	msg := fmt.Sprintf("message from active/client side with pid %d", os.Getpid())
	copy(conn.sendRegion, msg+"\x00") // snprintf

	fmt.Println("connected. posting send...")
	wr := verbs.SendWR{ // struct ibv_send_wr
		WRID:      1,
		Opcode:    verbs.WRSend,
		SGList:    []verbs.SGE{conn.sendMR.SGE(0, bufferSize)},
		SendFlags: verbs.SendSignaled,
	}
	testNZ(conn.qp.PostSend([]verbs.SendWR{wr}), "ibv_post_send") // ibv_post_send
	return false
}

func onDisconnect(id *rdmacm.ID) bool {
	conn := id.Context().(*connection)
	fmt.Println("disconnected.")

	id.DestroyQP()      // rdma_destroy_qp
	conn.sendMR.Dereg() // ibv_dereg_mr
	conn.recvMR.Dereg() // ibv_dereg_mr
	// The C program leaves its context to exit; here it is freed while
	// the ID still holds the device open.
	destroyContext()
	id.Destroy() // rdma_destroy_id
	return true  // exit the event loop
}

// buildContext makes the verbs objects on the connection's device and
// starts the poller.
func buildContext(verbsCtx *verbs.Context) {
	if sCtx != nil {
		if sCtx.ctx != verbsCtx {
			die("cannot handle events in more than one context.")
		}
		return
	}
	sCtx = &devContext{ctx: verbsCtx}
	var err error
	sCtx.pd, err = verbsCtx.AllocPD() // ibv_alloc_pd
	testNZ(err, "ibv_alloc_pd")
	sCtx.compChannel, err = verbsCtx.CreateCompChannel() // ibv_create_comp_channel
	testNZ(err, "ibv_create_comp_channel")
	sCtx.cq, err = verbsCtx.CreateCQ(10, sCtx.compChannel, 0) // ibv_create_cq
	testNZ(err, "ibv_create_cq")
	testNZ(sCtx.cq.ReqNotify(false), "ibv_req_notify_cq") // ibv_req_notify_cq

	ctx, cancel := context.WithCancel(context.Background())
	sCtx.stopPoller, sCtx.pollerDone = cancel, make(chan struct{})
	go pollCQ(ctx, sCtx) // pthread_create(&s_ctx->cq_poller_thread, NULL, poll_cq, NULL)
}

// destroyContext stops the poller and frees the verbs objects.
func destroyContext() {
	if sCtx == nil {
		return
	}
	sCtx.stopPoller()
	<-sCtx.pollerDone
	for { // acknowledge events the poller did not take
		select {
		case cq := <-sCtx.compChannel.C():
			cq.AckEvents(1)
			continue
		default:
		}
		break
	}
	drainCQ(sCtx.cq)         // and report completions it did not reach
	sCtx.cq.Destroy()        // ibv_destroy_cq
	sCtx.compChannel.Close() // ibv_destroy_comp_channel
	sCtx.pd.Dealloc()        // ibv_dealloc_pd
	sCtx = nil
}

func buildQPAttr() verbs.QPInitAttr {
	return verbs.QPInitAttr{ // memset(qp_attr, 0, sizeof(*qp_attr))
		SendCQ: sCtx.cq,
		RecvCQ: sCtx.cq,
		QPType: verbs.QPTRC,
		Cap:    verbs.QPCap{MaxSendWR: 10, MaxRecvWR: 10, MaxSendSGE: 1, MaxRecvSGE: 1},
	}
}

// pollCQ is the cq_poller_thread: wait for a completion event,
// acknowledge it, re-arm the CQ, and drain it.
func pollCQ(ctx context.Context, s *devContext) {
	defer close(s.pollerDone)
	for {
		cq, err := s.compChannel.GetCQEvent(ctx) // ibv_get_cq_event
		if err != nil {
			return
		}
		cq.AckEvents(1)                                  // ibv_ack_cq_events
		testNZ(cq.ReqNotify(false), "ibv_req_notify_cq") // ibv_req_notify_cq
		drainCQ(cq)
	}
}

// drainCQ hands every completion queued on cq to on_completion.
func drainCQ(cq *verbs.CQ) {
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:]) // ibv_poll_cq
		testNZ(err, "ibv_poll_cq")
		if n == 0 {
			return
		}
		onCompletion(&wc[0])
	}
}

func registerMemory(conn *connection) {
	conn.sendRegion = make([]byte, bufferSize)
	conn.recvRegion = make([]byte, bufferSize)
	var err error
	conn.sendMR, err = sCtx.pd.RegMR(conn.sendRegion, verbs.AccessLocalWrite|verbs.AccessRemoteWrite) // ibv_reg_mr
	testNZ(err, "ibv_reg_mr")
	conn.recvMR, err = sCtx.pd.RegMR(conn.recvRegion, verbs.AccessLocalWrite|verbs.AccessRemoteWrite) // ibv_reg_mr
	testNZ(err, "ibv_reg_mr")
}

func postReceives(conn *connection) {
	wr := verbs.RecvWR{ // struct ibv_recv_wr
		WRID:   1,
		SGList: []verbs.SGE{conn.recvMR.SGE(0, bufferSize)},
	}
	testNZ(conn.qp.PostRecv([]verbs.RecvWR{wr}), "ibv_post_recv") // ibv_post_recv
}

func onCompletion(wc *verbs.WC) {
	conn := theConn.Load() // (struct connection *)(uintptr_t)wc->wr_id
	if wc.Status != verbs.WCSuccess {
		die("on_completion: status is not IBV_WC_SUCCESS.")
	}
	if wc.Opcode&verbs.WCRecv != 0 {
		fmt.Printf("received message: %s\n", cString(conn.recvRegion))
	} else if wc.Opcode == verbs.WCSend {
		fmt.Println("send completed successfully.")
	}
	if conn.numCompletions.Add(1) == 2 {
		conn.id.Disconnect() // rdma_disconnect
	}
}

// cString returns the bytes of b before its first NUL, as printf's %s
// prints a C string.
func cString(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
