// Command rdmacm_server is the passive side of the rdma_cm client walked
// through in the seed notes (001): an event channel and an event loop that
// dispatches each connection manager event to a handler, a verbs context
// built on the first connection's device, a goroutine that waits on the
// completion channel and polls the CQ, and one message each way per
// connection. Pair it with rdmacm_client.
//
// The flow, with the librdmacm and libibverbs call each step makes:
//
//	main                rdma_create_event_channel, rdma_create_id,
//	                    rdma_bind_addr, rdma_listen, rdma_get_src_port,
//	                    then rdma_get_cm_event / copy / rdma_ack_cm_event
//	                    / on_event until done
//	on_connect_request  build_context (ibv_alloc_pd,
//	                    ibv_create_comp_channel, ibv_create_cq,
//	                    ibv_req_notify_cq, the poller), rdma_create_qp,
//	                    register_memory (ibv_reg_mr), post_receives
//	                    (ibv_post_recv), rdma_accept
//	on_connection       ibv_post_send of "message from passive/server side"
//	on_completion       prints what was received and sent
//	on_disconnect       rdma_destroy_qp, ibv_dereg_mr, rdma_disconnect
//	on_timewait_exit    rdma_destroy_id (see on_disconnect)
//
// Usage:
//
//	rdmacm_server [-a address] [-p port] [-n connections]
//
// It listens on every address (-a) on port 7471 (-p; 0 picks a free port,
// which it prints) and serves connections until interrupted, or until -n
// connections have come and gone.
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
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"

	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
	"github.com/rdmago/rdmago/verbs"
)

const bufferSize = 1024

var (
	address = flag.String("a", "0.0.0.0", "address to listen on")
	port    = flag.Uint("p", 7471, "port to listen on (0: any)")
	count   = flag.Int("n", 0, "exit after this many connections (0: never)")
)

// devContext is the seed's struct context: the verbs objects all
// connections share, built on the device of the first one.
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
	id   *rdmacm.ID
	qp   *verbs.QP
	wrID uint64 // names the connection in work requests

	recvMR *verbs.MR
	sendMR *verbs.MR

	recvRegion []byte
	sendRegion []byte
}

var (
	sCtx *devContext

	// C puts the connection's address in wr_id; Go cannot turn a uint64
	// back into a pointer, so wr_id is a key into this table.
	conns    sync.Map // uint64 -> *connection
	nextConn atomic.Uint64

	served int // connections that have come and gone
)

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
	ip, err := netip.ParseAddr(*address)
	testNZ(err, "parsing -a")
	addr := netip.AddrPortFrom(ip, uint16(*port))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	ec, err := rdmacm.CreateEventChannel() // rdma_create_event_channel
	testNZ(err, "rdma_create_event_channel")
	listener, err := rdmacm.CreateID(ec, nil, rdmacm.PSTCP) // rdma_create_id
	testNZ(err, "rdma_create_id")
	testNZ(listener.BindAddr(addr), "rdma_bind_addr") // rdma_bind_addr
	testNZ(listener.Listen(10), "rdma_listen")        // rdma_listen

	p := listener.LocalAddr().Port() // rdma_get_src_port
	fmt.Printf("listening on port %d.\n", p)

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

	destroyContext()
	listener.Destroy() // rdma_destroy_id
	ec.Close()         // rdma_destroy_event_channel
}

func onEvent(event *rdmacm.Event) bool {
	switch event.Type {
	case rdmacm.EventConnectRequest:
		return onConnectRequest(event.ID)
	case rdmacm.EventEstablished:
		return onConnection(event.ID.Context())
	case rdmacm.EventDisconnected:
		return onDisconnect(event.ID)
	case rdmacm.EventTimewaitExit:
		return onTimewaitExit(event.ID)
	}
	die("on_event: unknown event " + event.Type.String() + ".")
	return true
}

func onConnectRequest(id *rdmacm.ID) bool {
	fmt.Println("received connection request.")

	buildContext(id.Verbs())
	qpAttr := buildQPAttr()
	testNZ(id.CreateQP(sCtx.pd, &qpAttr), "rdma_create_qp") // rdma_create_qp

	conn := &connection{id: id, qp: id.QP()}
	id.SetContext(conn) // id->context = conn

	registerMemory(conn)
	postReceives(conn)

	var cmParams rdmacm.ConnParam               // memset(&cm_params, 0, sizeof(cm_params))
	testNZ(id.Accept(&cmParams), "rdma_accept") // rdma_accept
	return false
}

func onConnection(context any) bool {
	conn := context.(*connection)
	msg := fmt.Sprintf("message from passive/server side with pid %d", os.Getpid())
	copy(conn.sendRegion, msg+"\x00") // snprintf

	fmt.Println("connected. posting send...")
	wr := verbs.SendWR{ // struct ibv_send_wr
		WRID:      conn.wrID,
		Opcode:    verbs.WRSend,
		SGList:    []verbs.SGE{conn.sendMR.SGE(0, bufferSize)},
		SendFlags: verbs.SendSignaled,
	}
	testNZ(conn.qp.PostSend([]verbs.SendWR{wr}), "ibv_post_send") // ibv_post_send
	return false
}

func onDisconnect(id *rdmacm.ID) bool {
	conn := id.Context().(*connection)
	fmt.Println("peer disconnected.")

	id.DestroyQP()          // rdma_destroy_qp
	conn.sendMR.Dereg()     // ibv_dereg_mr
	conn.recvMR.Dereg()     // ibv_dereg_mr
	conns.Delete(conn.wrID) // free(conn)
	// In C, rdma_destroy_id would follow, and the kernel would answer the
	// peer's disconnect request and keep the connection in timewait. Here
	// the connection manager runs in this process: answer now
	// (rdma_disconnect) and destroy the ID when its timewait is over, so
	// that the answer goes out even if the program then exits.
	id.Disconnect() // rdma_disconnect
	return false
}

func onTimewaitExit(id *rdmacm.ID) bool {
	id.Destroy() // rdma_destroy_id
	served++
	return *count > 0 && served >= *count
}

// buildContext makes the shared verbs objects on the first connection's
// device and starts the poller; later connections must use the same
// device.
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

// destroyContext stops the poller and frees the shared verbs objects,
// which the C program leaves to its exit.
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
	channel := s.compChannel
	for {
		cq, err := channel.GetCQEvent(ctx) // ibv_get_cq_event
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
	conn.wrID = nextConn.Add(1)
	conns.Store(conn.wrID, conn)
}

func postReceives(conn *connection) {
	wr := verbs.RecvWR{ // struct ibv_recv_wr
		WRID:   conn.wrID,
		SGList: []verbs.SGE{conn.recvMR.SGE(0, bufferSize)},
	}
	testNZ(conn.qp.PostRecv([]verbs.RecvWR{wr}), "ibv_post_recv") // ibv_post_recv
}

func onCompletion(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		die("on_completion: status is not IBV_WC_SUCCESS.")
	}
	v, ok := conns.Load(wc.WRID)
	if !ok {
		return
	}
	conn := v.(*connection)
	if wc.Opcode&verbs.WCRecv != 0 {
		fmt.Printf("received message: %s\n", cString(conn.recvRegion))
	} else if wc.Opcode == verbs.WCSend {
		fmt.Println("send completed successfully.")
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
