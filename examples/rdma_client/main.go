// Command rdma_client is librdmacm's rdma_client example in Go: the
// "Client Operation" flow of the rdma_cm man page with the synchronous
// calls and the rdma_verbs.h helpers. It connects to rdma_server, sends a
// 16-byte message, receives the answer, and disconnects.
//
//	rdma_getaddrinfo   rdmacm.GetAddrInfo
//	rdma_create_ep     rdmacm.CreateEP (resolves address and route, makes the QP)
//	rdma_reg_msgs      (*ID).RegMsgs
//	rdma_post_recv     (*ID).PostRecv
//	rdma_connect       (*ID).Connect
//	rdma_post_send     (*ID).PostSend
//	rdma_get_send_comp (*ID).GetSendComp
//	rdma_get_recv_comp (*ID).GetRecvComp
//	rdma_disconnect    (*ID).Disconnect
//	rdma_dereg_mr      (*ID).DeregMR
//	rdma_destroy_ep    (*ID).DestroyEP
//
// Usage:
//
//	rdma_client [-s server_address] [-p port_number] [-b bind_address]
//
// By default it connects to 127.0.0.1 port 7471, as the C program does;
// -b picks the local address to connect from (default: the one the host
// routes from).
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
	"net/netip"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
	"github.com/rdmago/rdmago/verbs"
)

var (
	server = flag.String("s", "127.0.0.1", "server_address")
	port   = flag.String("p", "7471", "port_number")
	bind   = flag.String("b", "", "bind_address to connect from (default: the routed source)")
)

// msgLen is the size of the messages, as in the C program.
const msgLen = 16

func run(ctx context.Context) (err error) {
	hints := rdmacm.AddrInfo{PortSpace: rdmacm.PSTCP}
	if *bind != "" {
		a, err := netip.ParseAddr(*bind)
		if err != nil {
			return fmt.Errorf("-b: %w", err)
		}
		hints.SrcAddr = netip.AddrPortFrom(a, 0)
	}
	res, err := rdmacm.GetAddrInfo(*server, *port, &hints) // rdma_getaddrinfo
	if err != nil {
		return fmt.Errorf("rdma_getaddrinfo: %w", err)
	}

	attr := verbs.QPInitAttr{
		Cap:      verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: msgLen},
		SQSigAll: true,
	}
	id, err := rdmacm.CreateEP(res[0], nil, &attr) // rdma_create_ep
	if err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	defer id.DestroyEP() // rdma_destroy_ep
	// Check to see if we got inline data allowed or not.
	var sendFlags verbs.SendFlags
	if attr.Cap.MaxInlineData >= msgLen {
		sendFlags = verbs.SendInline
	} else {
		fmt.Println("rdma_client: device doesn't support IBV_SEND_INLINE, using sge sends")
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
	if err := id.Connect(nil); err != nil { // rdma_connect
		return fmt.Errorf("rdma_connect: %w", err)
	}
	defer id.Disconnect() // rdma_disconnect
	fmt.Printf("rdma_client: connected %v -> %v\n", id.LocalAddr(), id.PeerAddr())

	copy(sendMsg, "rdma_client ping")
	if err := id.PostSend(0, sendMR, 0, msgLen, sendFlags); err != nil { // rdma_post_send
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	wc, err := id.GetSendComp(ctx) // rdma_get_send_comp
	if err != nil {
		return fmt.Errorf("rdma_get_send_comp: %w", err)
	}
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("rdma_get_send_comp: completion %v", wc.Status)
	}
	wc, err = id.GetRecvComp(ctx) // rdma_get_recv_comp
	if err != nil {
		return fmt.Errorf("rdma_get_recv_comp: %w", err)
	}
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("rdma_get_recv_comp: completion %v", wc.Status)
	}
	fmt.Printf("rdma_client: received %q\n", trim(recvMsg[:wc.ByteLen]))
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
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s\n\t[-s server_address]\n\t[-p port_number]\n\t[-b bind_address]\n", os.Args[0])
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	fmt.Println("rdma_client: start")
	ret := 0
	if err := run(ctx); err != nil {
		fmt.Println(err) // perror
		ret = -1
	}
	fmt.Printf("rdma_client: end %d\n", ret)
	if ret != 0 {
		os.Exit(1)
	}
}
