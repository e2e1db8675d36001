package rsocket_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/rdmago/rdmago/rsocket"
	_ "github.com/rdmago/rdmago/rxe" // the software RoCE device: all a real program needs
)

// An rsocket is a net.Conn: here an echo server and its client, both on
// 127.0.0.1 in one process. Either end could be rdma-core's rstream, or
// any C program that uses rsockets.
func ExampleListen() {
	l, err := rsocket.Listen("tcp", "127.0.0.1:0") // rsocket, rbind, rlisten
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go func() {
		c, err := l.Accept() // raccept
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo until the client shuts down its side
	}()

	c, err := rsocket.Dial(context.Background(), "tcp", l.Addr().String()) // rconnect
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Fprintln(c, "hello over RDMA")
	c.CloseWrite() // rshutdown(SHUT_WR): the server's io.Copy sees EOF
	reply, err := io.ReadAll(c)
	fmt.Printf("%q %v\n", reply, err)
	// Output:
	// "hello over RDMA\n" <nil>
}

// net/http runs over rsockets as it is: the server takes the listener,
// the client's transport dials with a Dialer.
func ExampleDialer_DialContext() {
	l, err := rsocket.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s over %s\n", r.URL.Path, r.RemoteAddr[:strings.IndexByte(r.RemoteAddr, ':')])
	})}
	go srv.Serve(l)
	defer srv.Close()

	var d rsocket.Dialer
	tr := &http.Transport{DialContext: d.DialContext}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + l.Addr().String() + "/hello")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	fmt.Print(resp.Status, ": ", line)
	// Output:
	// 200 OK: /hello over 127.0.0.1
}
