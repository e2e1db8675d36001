package sockets

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/unwrap"
)

// FuzzParseHeader: any 24 bytes are refused or give a header whose fixed
// part fits in its length, and which writes back as it was read.
func FuzzParseHeader(f *testing.F) {
	for _, h := range []header{{op: opSend, msgLen: 30}, {op: opTSend, flags: flagRemoteCQData, msgLen: 40},
		{op: opWrite, destIOVLen: 2, msgLen: 100}, {op: opReadComplete, msgLen: 50}, {op: opConnMsg, msgLen: 72}} {
		var b [hdrLen]byte
		h.put(b[:])
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil {
			return
		}
		if h.msgLen < uint64(h.fixedLen()) || h.destIOVLen > maxIOV {
			t.Fatalf("%+v accepted: its fixed part is %d bytes", h, h.fixedLen())
		}
		var out [hdrLen]byte
		h.put(out[:])
		in := append([]byte(nil), b[:hdrLen]...)
		in[6], in[7] = 0, 0 // reserved
		if !bytes.Equal(out[:], in) {
			t.Fatalf("% x read as %+v writes back as % x", b[:hdrLen], h, out)
		}
	})
}

// fuzzEndpoint is an enabled RDM endpoint with a registered region, for
// the stream fuzzer.
func fuzzEndpoint(t testing.TB) (*ep, []byte) {
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = Name
	hints.EPAttr.Type = fabric.EPRDM
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	if err != nil {
		t.Fatal(err)
	}
	fab, _ := fabric.OpenFabric(infos[0])
	dom, _ := fab.OpenDomain(infos[0])
	cq, _ := dom.OpenCQ(&fabric.CQAttr{Size: 1 << 20})
	av, _ := dom.OpenAV(nil)
	fep, err := dom.OpenEndpoint(infos[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	fep.BindAV(av)
	fep.BindCQ(cq, fabric.BindTransmit|fabric.BindRecv)
	if err := fep.Enable(); err != nil {
		t.Fatal(err)
	}
	region := make([]byte, 4096)
	mr, _ := dom.RegMR(region, fabric.AccessRemoteRead|fabric.AccessRemoteWrite, 5)
	t.Cleanup(func() {
		fep.Close()
		mr.Close()
		dom.Close()
	})
	e := fabricDriver(fep)
	return e, region
}

// FuzzPeerStream: whatever a peer writes on a connection, the endpoint
// takes it without panicking, keeps no more of it than it was sent, and
// reads only within the regions it was given.
func FuzzPeerStream(f *testing.F) {
	msg := func(h header, body ...[]byte) []byte {
		n := hdrLen
		for _, b := range body {
			n += len(b)
		}
		h.msgLen = uint64(n)
		out := make([]byte, hdrLen)
		h.put(out)
		for _, b := range body {
			out = append(out, b...)
		}
		return out
	}
	var addr [addrLen]byte
	putAddr(addr[:], netip.MustParseAddrPort("127.0.0.1:5000"))
	var iov [iovLen]byte
	rmaIOV{addr: 16, len: 8, key: 5}.put(iov[:])
	tag := binary.LittleEndian.AppendUint64(nil, 9)
	f.Add(msg(header{op: opConnMsg}, addr[:]))
	f.Add(msg(header{op: opSend, flags: flagTransmitComplete}, []byte("hello")))
	f.Add(msg(header{op: opTSend}, tag, []byte("tagged")))
	f.Add(msg(header{op: opWrite, destIOVLen: 1}, iov[:], []byte("12345678")))
	f.Add(msg(header{op: opRead, destIOVLen: 1}, iov[:]))
	f.Add(append(msg(header{op: opSend}, []byte("a")), msg(header{op: opSendComplete}, make([]byte, 16))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, _ := fuzzEndpoint(t)
		c := newConn(e, netip.AddrPort{}, nil)
		e.Recv(make([]byte, 4), nil, fabric.AddrNotAvail, nil)
		e.TRecv(make([]byte, 64), nil, fabric.AddrNotAvail, 9, 0, nil)
		r := bufio.NewReader(bytes.NewReader(data))
		for e.receive(c, r) == nil {
		}
		kept := 0
		for _, m := range e.unexp {
			kept += len(m.data)
		}
		if kept > len(data) {
			t.Fatalf("%d bytes kept of %d received", kept, len(data))
		}
	})
}

// fabricDriver is the provider's endpoint under a program's.
func fabricDriver(x *fabric.Endpoint) *ep { return unwrap.Endpoint(x).(*ep) }
