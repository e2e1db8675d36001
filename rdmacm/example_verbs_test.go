package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// exampleDevices makes two software RoCE devices on an in-memory network
// and registers them with the connection manager. A program on real
// interfaces needs none of this: the rxe devices of the host's addresses
// are found by themselves.
func exampleDevices(a, b string) (unregister func()) {
	network := link.NewNetwork(1)
	var undo []func()
	for _, addr := range []string{a, b} {
		l, err := network.Attach(netip.MustParseAddr(addr))
		exampleCheck(err)
		dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
		exampleCheck(err)
		undo = append(undo, rdmacm.RegisterDevice(dev))
	}
	return func() {
		for _, f := range undo {
			f()
		}
	}
}

func exampleCheck(err error) {
	if err != nil {
		panic(err)
	}
}

// The synchronous flow of librdmacm's rdma_server and rdma_client:
// rdma_getaddrinfo and rdma_create_ep on both sides, rdma_listen and
// rdma_get_request on the server, the rdma_verbs.h helpers for the data.
func Example_verbs() {
	defer exampleDevices("192.0.2.1", "192.0.2.2")()
	ctx := context.Background()
	attr := verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, SQSigAll: true}

	// Server: a passive endpoint; every request it hands out gets a QP.
	res, err := rdmacm.GetAddrInfo("192.0.2.1", "7471", &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive}) // rdma_getaddrinfo
	exampleCheck(err)
	listen, err := rdmacm.CreateEP(res[0], nil, &attr) // rdma_create_ep
	exampleCheck(err)
	defer listen.DestroyEP()       // rdma_destroy_ep
	exampleCheck(listen.Listen(0)) // rdma_listen
	received := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		id, err := listen.GetRequest(ctx) // rdma_get_request
		exampleCheck(err)
		defer id.DestroyEP()
		msg := make([]byte, 16)
		mr, err := id.RegMsgs(msg) // rdma_reg_msgs
		exampleCheck(err)
		defer id.DeregMR(mr)                          // rdma_dereg_mr
		exampleCheck(id.PostRecv(0, mr, 0, len(msg))) // rdma_post_recv
		exampleCheck(id.Accept(nil))                  // rdma_accept
		wc, err := id.GetRecvComp(ctx)                // rdma_get_recv_comp
		exampleCheck(err)
		received <- string(msg[:wc.ByteLen])
		copy(msg, "pong")
		exampleCheck(id.PostSend(0, mr, 0, 4, 0)) // rdma_post_send
		_, err = id.GetSendComp(ctx)              // rdma_get_send_comp
		exampleCheck(err)
		exampleCheck(id.Disconnect()) // rdma_disconnect
	}()

	// Client: an active endpoint, resolved and with its QP.
	res, err = rdmacm.GetAddrInfo("192.0.2.1", "7471", &rdmacm.AddrInfo{SrcAddr: netip.MustParseAddrPort("192.0.2.2:0")})
	exampleCheck(err)
	id, err := rdmacm.CreateEP(res[0], nil, &attr)
	exampleCheck(err)
	defer id.DestroyEP()
	msg := make([]byte, 16)
	mr, err := id.RegMsgs(msg)
	exampleCheck(err)
	defer id.DeregMR(mr)
	exampleCheck(id.PostRecv(0, mr, 0, len(msg)))
	exampleCheck(id.Connect(nil)) // rdma_connect
	copy(msg, "ping")
	exampleCheck(id.PostSend(0, mr, 0, 4, 0))
	wc, err := id.GetSendComp(ctx)
	exampleCheck(err)
	fmt.Println("client sent:", wc.Opcode, wc.Status)
	fmt.Println("server received:", <-received)
	wc, err = id.GetRecvComp(ctx)
	exampleCheck(err)
	fmt.Println("client received:", string(msg[:wc.ByteLen]))
	<-done
	// Output:
	// client sent: SEND success
	// server received: ping
	// client received: pong
}

// Dial and Listen set up a connected RC QP in one call each; Setup posts
// the first receive before the connection is made.
func ExampleDial() {
	defer exampleDevices("192.0.2.1", "192.0.2.2")()
	ctx := context.Background()

	buf := make([]byte, 64)
	var mr *verbs.MR
	l, err := rdmacm.Listen("192.0.2.1:0", &rdmacm.Options{
		Setup: func(c *rdmacm.Conn) (err error) {
			if mr, err = c.ID.RegMsgs(buf); err != nil {
				return err
			}
			return c.ID.PostRecv(1, mr, 0, len(buf))
		},
	})
	exampleCheck(err)
	defer l.Close()
	server := make(chan string)
	go func() {
		defer close(server)
		c, err := l.Accept(ctx)
		exampleCheck(err)
		defer c.Close()
		defer mr.Dereg()
		wc, err := c.ID.GetRecvComp(ctx)
		exampleCheck(err)
		server <- fmt.Sprintf("server: %q with private data %q", buf[:wc.ByteLen], c.PrivateData[:5])
		exampleCheck(c.WaitDisconnect(ctx))
		server <- "server: peer disconnected"
	}()

	c, err := rdmacm.Dial(ctx, "192.0.2.1:"+strconv.Itoa(int(l.Addr().Port())), &rdmacm.Options{
		LocalAddr:   netip.MustParseAddrPort("192.0.2.2:0"),
		PrivateData: []byte("hello"),
	})
	exampleCheck(err)
	msg := []byte("over a fresh RC connection")
	smr, err := c.PD.RegMR(msg, verbs.AccessLocalWrite)
	exampleCheck(err)
	exampleCheck(c.ID.PostSend(2, smr, 0, len(msg), verbs.SendSignaled))
	wc, err := c.ID.GetSendComp(ctx)
	exampleCheck(err)
	fmt.Println("client:", wc.Status)
	fmt.Println(<-server)
	exampleCheck(smr.Dereg())
	exampleCheck(c.Close())
	for line := range server {
		fmt.Println(line)
	}
	// Output:
	// client: success
	// server: "over a fresh RC connection" with private data "hello"
	// server: peer disconnected
}
