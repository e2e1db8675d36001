package tcp

import (
	"net"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/ipif"
	"github.com/rdmago/rdmago/fabric/internal/unwrap"
)

// streamEndpoint returns a connected endpoint whose peer is the returned
// raw connection, with receive buffers posted and a region registered (key
// 1, remote read and write).
func streamEndpoint(t testing.TB) (*ep, *net.TCPConn, *fabric.CQ, *fabric.EQ) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	info := template(ipif.Iface{Name: "lo"})
	fab := &fabric.Fabric{}
	dom, _ := fab.OpenDomain(info)
	if _, err := dom.RegMR(make([]byte, 4096), fabric.AccessRemoteRead|fabric.AccessRemoteWrite, 1); err != nil {
		t.Fatal(err)
	}
	cq, _ := dom.OpenCQ(nil)
	eq, _ := fab.OpenEQ()
	d, _ := provider{}.Endpoint(unwrap.Domain(dom).(fabric.DomainRef), info, nil)
	e := d.(*ep)
	e.BindEQ(eq)
	e.BindCQ(cq, fabric.BindTransmit|fabric.BindRecv)
	e.state = stConnected
	if err := e.attach(c); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		e.Recv(make([]byte, 100), nil, fabric.AddrNotAvail, i)
	}
	return e, peer, cq, eq
}

// FuzzPeerStream feeds an endpoint whatever a peer might send: it must
// fail the connection cleanly (error completions, FI_SHUTDOWN) or take
// the frames, never panic or hang.
func FuzzPeerStream(f *testing.F) {
	frame := func(h header, payload []byte) []byte {
		b := make([]byte, maxHdrLen)
		n := marshalHeader(b, &h, uint64(len(payload)))
		return append(b[:n], payload...)
	}
	f.Add(frame(header{op: opMsg}, []byte("hello")))
	f.Add(append(frame(header{op: opMsg, flags: flagDeliveryComplete}, make([]byte, 200)), ackFrame...))
	f.Add(frame(header{op: opWrite, flags: flagRemoteCQData, iov: []rmaIOV{{10, 5, 1}}}, []byte("abcde")))
	f.Add(frame(header{op: opReadReq, iov: []rmaIOV{{0, 64, 1}}}, nil))
	f.Add(frame(header{op: opReadRsp}, []byte("x")))
	f.Add(frame(header{op: opWrite, iov: []rmaIOV{{4090, 10, 1}}}, make([]byte, 10)))
	f.Fuzz(func(t *testing.T, stream []byte) {
		e, peer, cq, _ := streamEndpoint(t)
		defer e.Close()
		defer peer.Close()
		go func() {
			peer.Write(stream)
			peer.CloseWrite()
		}()
		deadline := time.Now().Add(2 * time.Second)
		var buf [8]fabric.CQEntry
		for time.Now().Before(deadline) {
			cq.Read(buf[:])
			cq.ReadErr()
			e.mu.Lock()
			done := e.state != stConnected
			e.mu.Unlock()
			if done {
				return
			}
			time.Sleep(time.Millisecond)
		}
		// Still connected after the whole stream: only if it waits
		// for more (a frame cut short, or messages beyond the buffers).
	})
}
