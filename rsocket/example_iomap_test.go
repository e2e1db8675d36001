package rsocket_test

import (
	"context"
	"fmt"
	"io"

	"github.com/rdmago/rdmago/rsocket"
)

// The server maps a buffer (riomap) into the client's iomap and says so
// with one byte (rsend), which reaches the client after the mapping; the
// client writes into the buffer directly (riowrite), then sends one byte
// that tells the server the data is there, as RC ordering puts the
// writes first.
func ExampleConn_IOMap() {
	lc := rsocket.ListenConfig{}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	done := make(chan string)
	go func() {
		c, err := l.AcceptRsocket(context.Background())
		if err != nil {
			done <- err.Error()
			return
		}
		defer c.Close()
		buf := make([]byte, 16)
		if _, err := c.IOMap(buf, rsocket.ProtWrite, 4096); err != nil { // riomap at offset 4096
			done <- err.Error()
			return
		}
		c.Write([]byte{0}) // "mapped"
		var b [1]byte
		io.ReadFull(c, b[:]) // "written"
		done <- string(buf[:5])
	}()

	d := rsocket.Dialer{Config: rsocket.Config{IOMapSize: 1}} // RDMA_IOMAPSIZE: room for the server's one mapping
	c, err := d.Dial(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	var b [1]byte
	io.ReadFull(c, b[:])                                        // "mapped"
	if _, err := c.IOWrite([]byte("hello"), 4096); err != nil { // riowrite
		fmt.Println(err)
		return
	}
	c.Write([]byte{1}) // "written"
	fmt.Println(<-done)
	// Output:
	// hello
}
