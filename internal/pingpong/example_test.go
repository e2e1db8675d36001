package pingpong_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/rdmago/rdmago/internal/pingpong"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
)

// Two sides of `rdmago ud_pingpong -c -n 100` in one program, on two
// software RoCE devices joined by an in-memory network whose 1500-byte
// netdev MTU gives a port MTU of 1024, the largest UD message. The server
// accepts the address exchange on a listener of its own.
func Example() {
	network := link.NewNetwork(1)
	device := func(addr string) *rxe.Config {
		l, err := network.Attach(netip.MustParseAddr(addr))
		if err != nil {
			panic(err)
		}
		return &rxe.Config{Links: []link.Link{l}, NetdevMTU: 1500}
	}
	srvDev, err := rxe.NewDevice(*device("192.0.2.1"))
	if err != nil {
		panic(err)
	}
	cliDev, err := rxe.NewDevice(*device("192.0.2.2"))
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}

	o := pingpong.DefaultsFor(pingpong.UD) // ibv_ud_pingpong's defaults
	o.GIDIndex, o.Iters, o.Check = 0, 100, true
	srv, cli := o, o
	srv.Dev, srv.Listener = srvDev, ln
	cli.Dev, cli.Server, cli.Port = cliDev, "127.0.0.1", ln.Addr().(*net.TCPAddr).Port

	ctx := context.Background()
	done := make(chan error)
	go func() {
		_, err := pingpong.Run(ctx, io.Discard, srv) // prints what ibv_ud_pingpong prints
		done <- err
	}()
	res, err := pingpong.Run(ctx, io.Discard, cli)
	if err := <-done; err != nil {
		panic(err)
	}
	if err != nil {
		panic(err)
	}
	fmt.Println(o.Transport.Tool(), "message size", o.Size)
	fmt.Println(res.Bytes, "bytes moved")
	// Output:
	// ibv_ud_pingpong message size 1024
	// 204800 bytes moved
}
