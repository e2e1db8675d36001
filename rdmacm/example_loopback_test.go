package rdmacm_test

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rxe" // the software RoCE device: all a real program needs
)

// A real program imports the software device and nothing else: the
// devices of the host's interfaces are found by themselves. Here both
// ends are in one process on 127.0.0.1 (device rxe_lo); they could as well
// be two processes, or two hosts.
func ExampleListen() {
	ctx := context.Background()
	l, err := rdmacm.Listen("127.0.0.1:0", nil) // rdma_bind_addr, rdma_listen
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	server := make(chan string)
	go func() {
		defer close(server)
		c, err := l.Accept(ctx) // CONNECT_REQUEST, rdma_accept, ESTABLISHED
		if err != nil {
			server <- err.Error()
			return
		}
		server <- "server: connection from " + c.RemoteAddr().Addr().String()
		c.WaitDisconnect(ctx)
		c.Close()
	}()
	c, err := rdmacm.Dial(ctx, l.Addr().String(), nil) // resolve, rdma_connect
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("client: connected to", c.RemoteAddr().Addr(), "over QP", c.QP.Type())
	fmt.Println(<-server)
	c.Close() // rdma_disconnect
	<-server
	// Output:
	// client: connected to 127.0.0.1 over QP RC
	// server: connection from 127.0.0.1
}
