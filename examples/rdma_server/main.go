// Command rdma_server is librdmacm's rdma_server example in Go: the
// "Server Operation" flow of the rdma_cm man page with the synchronous
// calls and the rdma_verbs.h helpers. It waits for one connection, receives
// a 16-byte message, answers with one, and disconnects.
//
//	rdma_getaddrinfo   rdmacm.GetAddrInfo (RAI_PASSIVE)
//	rdma_create_ep     rdmacm.CreateEP (keeps the QP attributes for requests)
//	rdma_listen        (*ID).Listen
//	rdma_get_request   (*ID).GetRequest (the new ID comes with its QP)
//	ibv_query_qp       (*verbs.QP).Query
//	rdma_reg_msgs      (*ID).RegMsgs
//	rdma_post_recv     (*ID).PostRecv
//	rdma_accept        (*ID).Accept
//	rdma_get_recv_comp (*ID).GetRecvComp
//	rdma_post_send     (*ID).PostSend
//	rdma_get_send_comp (*ID).GetSendComp
//	rdma_disconnect    (*ID).Disconnect
//	rdma_dereg_mr      (*ID).DeregMR
//	rdma_destroy_ep    (*ID).DestroyEP
//
// Usage:
//
//	rdma_server [-s server_address] [-p port_number]
//
// By default it listens on every address (0.0.0.0) on port 7471, as the C
// program does. Start it, then connect with rdma_client.
//
// rdmago's software RDMA device is shared by every process on the host, as
// Linux Soft-RoCE's is, so server and client run side by side on loopback:
//
//	go run ./examples/rdma_server &
//	go run ./examples/rdma_client -s 127.0.0.1
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
	"github.com/rdmago/rdmago/verbs"
)

var (
	server = flag.String("s", "", "server_address to listen on (default: every address)")
	port   = flag.String("p", "7471", "port_number")
)

// msgLen is the size of the messages, as in the C program.
const msgLen = 16

func run(ctx context.Context) (err error) {
	hints := rdmacm.AddrInfo{Flags: rdmacm.RAIPassive, PortSpace: rdmacm.PSTCP}
	res, err := rdmacm.GetAddrInfo(*server, *port, &hints) // rdma_getaddrinfo
	if err != nil {
		return fmt.Errorf("rdma_getaddrinfo: %w", err)
	}

	initAttr := verbs.QPInitAttr{
		Cap:      verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: msgLen},
		SQSigAll: true,
	}
	listenID, err := rdmacm.CreateEP(res[0], nil, &initAttr) // rdma_create_ep
	if err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	defer listenID.DestroyEP() // rdma_destroy_ep of the listening ID

	if err := listenID.Listen(0); err != nil { // rdma_listen
		return fmt.Errorf("rdma_listen: %w", err)
	}
	fmt.Printf("rdma_server: listening on %v\n", listenID.LocalAddr())

	id, err := listenID.GetRequest(ctx) // rdma_get_request
	if err != nil {
		return fmt.Errorf("rdma_get_request: %w", err)
	}
	defer id.DestroyEP() // rdma_destroy_ep of the connection's ID

	_, attr, err := id.QP().Query() // ibv_query_qp
	if err != nil {
		return fmt.Errorf("ibv_query_qp: %w", err)
	}
	var sendFlags verbs.SendFlags
	if attr.Cap.MaxInlineData >= msgLen {
		sendFlags = verbs.SendInline
	} else {
		fmt.Println("rdma_server: device doesn't support IBV_SEND_INLINE, using sge sends")
	}

	recvMsg := make([]byte, msgLen)
	sendMsg := make([]byte, msgLen)
	mr, err := id.RegMsgs(recvMsg) // rdma_reg_msgs
	if err != nil {
		return fmt.Errorf("rdma_reg_msgs for recv_msg: %w", err)
	}
	defer id.DeregMR(mr) // rdma_dereg_mr
	// C sends inline data straight from send_msg; Go names every buffer
	// by its memory region, inline or not, so send_msg is registered too.
	sendMR, err := id.RegMsgs(sendMsg)
	if err != nil {
		return fmt.Errorf("rdma_reg_msgs for send_msg: %w", err)
	}
	defer id.DeregMR(sendMR)

	if err := id.PostRecv(0, mr, 0, msgLen); err != nil { // rdma_post_recv
		return fmt.Errorf("rdma_post_recv: %w", err)
	}
	if err := id.Accept(nil); err != nil { // rdma_accept
		return fmt.Errorf("rdma_accept: %w", err)
	}
	defer id.Disconnect() // rdma_disconnect

	wc, err := id.GetRecvComp(ctx) // rdma_get_recv_comp
	if err != nil {
		return fmt.Errorf("rdma_get_recv_comp: %w", err)
	}
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("rdma_get_recv_comp: completion %v", wc.Status)
	}
	fmt.Printf("rdma_server: received %q\n", trim(recvMsg[:wc.ByteLen]))

	copy(sendMsg, "rdma_server pong")
	if err := id.PostSend(0, sendMR, 0, msgLen, sendFlags); err != nil { // rdma_post_send
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	wc, err = id.GetSendComp(ctx) // rdma_get_send_comp
	if err != nil {
		return fmt.Errorf("rdma_get_send_comp: %w", err)
	}
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("rdma_get_send_comp: completion %v", wc.Status)
	}
	return nil
}

// trim cuts a C string at its first NUL.
func trim(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s\n\t[-s server_address]\n\t[-p port_number]\n", os.Args[0])
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	fmt.Println("rdma_server: start")
	ret := 0
	if err := run(ctx); err != nil {
		fmt.Println(err) // perror
		ret = -1
	}
	fmt.Printf("rdma_server: end %d\n", ret)
	if ret != 0 {
		os.Exit(1)
	}
}
