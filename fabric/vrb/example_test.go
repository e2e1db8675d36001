package vrb_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"time"

	"github.com/rdmago/rdmago/fabric"
	_ "github.com/rdmago/rdmago/fabric/vrb" // the verbs provider
	_ "github.com/rdmago/rdmago/rxe"        // the software RoCEv2 device it runs on
)

// A server and a client in one program, over the verbs provider on the
// software device bound to 127.0.0.1: fi_listen, fi_connect with
// private data, fi_accept, then an RDMA WRITE into the server's
// registered memory, named by its virtual address and key, and an atomic
// fetch-and-add on a counter there.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "verbs"
	hints.EPAttr.Type = fabric.EPMsg

	// The server listens (fi_getinfo with FI_SOURCE, fi_passive_ep).
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	check(err)
	fab, _ := fabric.OpenFabric(infos[0])
	eq, _ := fab.OpenEQ()
	pep, err := fab.OpenPassiveEndpoint(infos[0], nil)
	check(err)
	defer pep.Close()
	check(pep.Bind(eq))
	check(pep.Listen())
	name, _ := pep.Name()

	// open makes a domain, CQ, endpoint and registered buffer.
	type side struct {
		dom *fabric.Domain
		cq  *fabric.CQ
		ep  *fabric.Endpoint
		buf []byte
		mr  *fabric.MR
	}
	open := func(fab *fabric.Fabric, eq *fabric.EQ, info *fabric.Info) *side {
		s := &side{buf: make([]byte, 64)}
		s.dom, err = fab.OpenDomain(info)
		check(err)
		s.cq, _ = s.dom.OpenCQ(nil)
		s.ep, err = s.dom.OpenEndpoint(info, nil)
		check(err)
		check(s.ep.BindEQ(eq))
		check(s.ep.BindCQ(s.cq, fabric.BindTransmit|fabric.BindRecv))
		check(s.ep.Enable())
		s.mr, err = s.dom.RegMR(s.buf, fabric.AccessSend|fabric.AccessRecv|fabric.AccessRemoteWrite, 0)
		check(err)
		return s
	}

	// The client connects to the server's name.
	hints.DestAddr = name
	cinfos, err := fabric.GetInfo("", "", 0, hints)
	check(err)
	cfab, _ := fabric.OpenFabric(cinfos[0])
	ceq, _ := cfab.OpenEQ()
	cli := open(cfab, ceq, cinfos[0])
	defer cli.ep.Close()
	check(cli.ep.Connect(name, []byte("hi")))

	req, err := eq.SRead(ctx) // FI_CONNREQ
	check(err)
	fmt.Printf("%s with %q\n", req.Event, req.Data)
	srv := open(fab, eq, req.Info)
	defer srv.ep.Close()
	check(srv.ep.Accept(nil))
	ev, err := ceq.SRead(ctx)
	check(err)
	fmt.Println("client:", ev.Event)

	// fi_write into the server's region; fi_cq_sread for its completion.
	n := copy(cli.buf, "written remotely")
	check(cli.ep.Write(cli.buf[:n], cli.mr.Desc(), fabric.AddrNotAvail, srv.mr.Addr(), srv.mr.Key(), "w"))
	var c [1]fabric.CQEntry
	_, err = cli.cq.SRead(ctx, c[:])
	check(err)
	fmt.Printf("completion %v; server memory: %q\n", c[0].Context, srv.buf[:n])

	// fi_fetch_atomic FI_SUM on a 64-bit counter in the server's region
	// (IBV_WR_ATOMIC_FETCH_AND_ADD): the prior value comes back.
	addend, prior := cli.buf[40:48], cli.buf[48:56]
	binary.NativeEndian.PutUint64(addend, 5)
	check(cli.ep.FetchAtomic(addend, cli.mr.Desc(), prior, cli.mr.Desc(), fabric.AddrNotAvail, srv.mr.Addr()+56, srv.mr.Key(),
		fabric.Uint64, fabric.OpSum, "add"))
	_, err = cli.cq.SRead(ctx, c[:])
	check(err)
	fmt.Printf("completion %v: fetched %d, the counter is now %d\n", c[0].Context,
		binary.NativeEndian.Uint64(prior), binary.NativeEndian.Uint64(srv.buf[56:]))
	// Output:
	// FI_CONNREQ with "hi"
	// client: FI_CONNECTED
	// completion w; server memory: "written remotely"
	// completion add: fetched 0, the counter is now 5
}

// Two datagram endpoints (FI_EP_DGRAM, UD) on the software device's
// loopback: each names itself with fi_getname (an FI_ADDR_IB_UD name),
// the sender puts the receiver's name in its AV (fi_av_insert), and a
// datagram goes by that handle. The receive buffer begins with the
// 40-byte prefix that takes the GRH (FI_MSG_PREFIX).
func Example_datagram() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "verbs"
	hints.EPAttr.Type = fabric.EPDgram
	hints.DomainAttr.Name = "rxe_lo-dgram"
	infos, err := fabric.GetInfo("", "", 0, hints)
	check(err)
	info := infos[0]
	prefix := info.EPAttr.MsgPrefixSize

	type end struct {
		ep  *fabric.Endpoint
		av  *fabric.AV
		cq  *fabric.CQ
		buf []byte
		mr  *fabric.MR
	}
	open := func() *end {
		fab, _ := fabric.OpenFabric(info)
		dom, err := fab.OpenDomain(info)
		check(err)
		e := &end{buf: make([]byte, 1024)}
		e.av, _ = dom.OpenAV(nil)
		e.cq, _ = dom.OpenCQ(nil)
		e.ep, err = dom.OpenEndpoint(info, nil)
		check(err)
		check(e.ep.BindAV(e.av))
		check(e.ep.BindCQ(e.cq, fabric.BindTransmit|fabric.BindRecv))
		check(e.ep.Enable())
		e.mr, err = dom.RegMR(e.buf, fabric.AccessSend|fabric.AccessRecv, 0)
		check(err)
		return e
	}
	rx, tx := open(), open()
	defer rx.ep.Close()
	defer tx.ep.Close()

	format, name, err := fabric.GetName(rx.ep)
	check(err)
	peer, err := tx.av.InsertName(format, name)
	check(err)
	fmt.Println("the receiver's name is", format, "of", len(name), "bytes")

	check(rx.ep.Recv(rx.buf[:prefix+256], rx.mr.Desc(), fabric.AddrNotAvail, nil))
	n := copy(tx.buf, "a datagram")
	check(tx.ep.Send(tx.buf[:n], tx.mr.Desc(), peer, nil))
	var c [1]fabric.CQEntry
	_, err = tx.cq.SRead(ctx, c[:])
	check(err)
	_, err = rx.cq.SRead(ctx, c[:])
	check(err)
	fmt.Printf("received %q after the %d-byte prefix\n", c[0].Buf[prefix:], prefix)
	// Output:
	// the receiver's name is FI_ADDR_IB_UD of 32 bytes
	// received "a datagram" after the 40-byte prefix
}
