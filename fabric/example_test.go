package fabric_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/rdmago/rdmago/fabric"
	_ "github.com/rdmago/rdmago/fabric/tcp" // the tcp provider
)

// A server and a client over the tcp provider on loopback: connect with
// private data, send one message, shut down. The calls are libfabric's,
// one for one.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "tcp"
	hints.EPAttr.Type = fabric.EPMsg
	hints.Caps = fabric.CapMsg

	// Server: fi_getinfo with FI_SOURCE, fi_passive_ep, fi_listen.
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	must(err)
	fab, err := fabric.OpenFabric(infos[0])
	must(err)
	eq, err := fab.OpenEQ()
	must(err)
	pep, err := fab.OpenPassiveEndpoint(infos[0], nil)
	must(err)
	defer pep.Close()
	must(pep.Bind(eq))
	must(pep.Listen())
	name, err := pep.Name()
	must(err)

	// Client: fi_getinfo for the server's address, an endpoint, fi_connect.
	cinfos, err := fabric.GetInfo(name.Addr().String(), fmt.Sprint(name.Port()), 0, hints)
	must(err)
	cfab, err := fabric.OpenFabric(cinfos[0])
	must(err)
	ceq, err := cfab.OpenEQ()
	must(err)
	cdom, err := cfab.OpenDomain(cinfos[0])
	must(err)
	ccq, err := cdom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatMsg})
	must(err)
	cep, err := cdom.OpenEndpoint(cinfos[0], nil)
	must(err)
	defer cep.Close()
	must(cep.BindEQ(ceq))
	must(cep.BindCQ(ccq, fabric.BindTransmit|fabric.BindRecv))
	must(cep.Enable())
	must(cep.Connect(name, []byte("hello")))

	// Server: FI_CONNREQ, an endpoint on its info, fi_accept.
	req, err := eq.SRead(ctx)
	must(err)
	fmt.Printf("%s with %q\n", req.Event, req.Data)
	dom, err := fab.OpenDomain(req.Info)
	must(err)
	cq, err := dom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatMsg})
	must(err)
	ep, err := dom.OpenEndpoint(req.Info, nil)
	must(err)
	defer ep.Close()
	must(ep.BindEQ(eq))
	must(ep.BindCQ(cq, fabric.BindTransmit|fabric.BindRecv))
	must(ep.Enable())
	buf := make([]byte, 64)
	must(ep.Recv(buf, nil, fabric.AddrNotAvail, "my receive"))
	must(ep.Accept(nil))
	_, err = eq.SRead(ctx) // FI_CONNECTED
	must(err)
	ev, err := ceq.SRead(ctx)
	must(err)
	fmt.Println("client:", ev.Event)

	// fi_send, and the completions on both sides.
	must(cep.Send([]byte("over the fabric"), nil, fabric.AddrNotAvail, "my send"))
	var c [1]fabric.CQEntry
	_, err = ccq.SRead(ctx, c[:])
	must(err)
	fmt.Println("client completion:", c[0].Context)
	_, err = cq.SRead(ctx, c[:])
	must(err)
	fmt.Printf("server completion: %v, %q\n", c[0].Context, c[0].Buf)
	// Output:
	// FI_CONNREQ with "hello"
	// client: FI_CONNECTED
	// client completion: my send
	// server completion: my receive, "over the fabric"
}
