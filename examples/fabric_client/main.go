// Command fabric_client is the client of seed 000's flow over a libfabric
// provider, in Go: fi_getinfo → fi_fabric → fi_domain → fi_av_open →
// fi_av_insert → fi_eq_open → fi_endpoint → fi_connect → fi_mr_reg →
// fi_recv / fi_send → fi_write → fi_close, over the provider -p names
// (tcp, the default, sockets, the seed's, or verbs). See fabric_server.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/fabric"
	_ "github.com/rdmago/rdmago/fabric/sockets" // the sockets provider
	_ "github.com/rdmago/rdmago/fabric/tcp"     // the tcp provider
	_ "github.com/rdmago/rdmago/fabric/udp"     // the udp provider
	_ "github.com/rdmago/rdmago/fabric/vrb"     // the verbs provider
	_ "github.com/rdmago/rdmago/rdmacore"       // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"            // the software RoCEv2 device verbs runs on
)

var (
	prov = flag.String("p", "tcp", "provider: tcp, sockets or verbs")
	addr = flag.String("a", "127.0.0.1", "server address")
	port = flag.Int("port", 9228, "server port")
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("fabric_client: ")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = *prov
	hints.EPAttr.Type = fabric.EPMsg
	hints.Caps = fabric.CapMsg | fabric.CapRMA
	infos, err := fabric.GetInfo(*addr, strconv.Itoa(*port), 0, hints) // fi_getinfo
	if err != nil {
		return err
	}
	info := infos[0]
	fab, err := fabric.OpenFabric(info) // fi_fabric
	if err != nil {
		return err
	}
	defer fab.Close()
	dom, err := fab.OpenDomain(info) // fi_domain
	if err != nil {
		return err
	}
	defer dom.Close()
	av, err := dom.OpenAV(nil) // fi_av_open
	if err != nil {
		return err
	}
	defer av.Close()
	server, err := av.InsertSvc(*addr, strconv.Itoa(*port)) // fi_av_insertsvc
	if err != nil {
		return err
	}
	eq, err := fab.OpenEQ() // fi_eq_open
	if err != nil {
		return err
	}
	defer eq.Close()
	cq, err := dom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatMsg}) // fi_cq_open
	if err != nil {
		return err
	}
	defer cq.Close()
	ep, err := dom.OpenEndpoint(info, nil) // fi_endpoint
	if err != nil {
		return err
	}
	defer ep.Close()
	for _, err := range []error{ep.BindEQ(eq), ep.BindCQ(cq, fabric.BindTransmit|fabric.BindRecv), ep.Enable()} {
		if err != nil {
			return err
		}
	}
	// One registered buffer: the key message comes into its start, what
	// is sent and written goes from further on.
	buf := make([]byte, 256)
	mr, err := dom.RegMR(buf, fabric.AccessSend|fabric.AccessRecv, 1) // fi_mr_reg
	if err != nil {
		return err
	}
	defer mr.Close()
	if err := ep.Recv(buf[:64], mr.Desc(), fabric.AddrNotAvail, "key"); err != nil { // fi_recv
		return err
	}
	to, err := av.Lookup(server) // fi_av_lookup
	if err != nil {
		return err
	}
	if err := ep.Connect(to, []byte("hello from fabric_client")); err != nil { // fi_connect
		return err
	}
	ev, err := eq.SRead(ctx)
	if err != nil {
		if e, rerr := eq.ReadErr(); rerr == nil {
			return fmt.Errorf("connect: %w", e.Err)
		}
		return err
	}
	fmt.Printf("%s with %q\n", ev.Event, ev.Data)

	c, err := next(ctx, cq)
	if err != nil {
		return err
	}
	if c.Len != 20 {
		return fmt.Errorf("key message of %d bytes", c.Len)
	}
	key := binary.LittleEndian.Uint64(buf)
	size := binary.LittleEndian.Uint32(buf[8:])
	addr := binary.LittleEndian.Uint64(buf[12:])
	fmt.Printf("server region: %d bytes\n", size)

	out := buf[64:]
	n := copy(out, "hello over the fabric")
	if err := ep.Send(out[:n], mr.Desc(), fabric.AddrNotAvail, "send"); err != nil { // fi_send
		return err
	}
	if _, err := next(ctx, cq); err != nil {
		return err
	}
	n = copy(out, "RDMA WRITE over "+info.FabricAttr.ProvName)
	if err := ep.Write(out[:n], mr.Desc(), fabric.AddrNotAvail, addr, key, "write"); err != nil { // fi_write
		return err
	}
	if _, err := next(ctx, cq); err != nil {
		return err
	}
	fmt.Printf("wrote %d bytes\n", n)
	// Where the provider has FI_ATOMIC (verbs and sockets do, tcp does not): add 5
	// to the 64-bit counter at the end of the server's region
	// (fi_fetch_atomic FI_SUM), then read it back (FI_ATOMIC_READ).
	if _, err := ep.FetchAtomicValid(fabric.Uint64, fabric.OpSum); err == nil {
		counter := addr + uint64(size) - 8
		operand, result := buf[32:40], buf[40:48]
		binary.NativeEndian.PutUint64(operand, 5)
		if err := ep.FetchAtomic(operand, mr.Desc(), result, mr.Desc(), fabric.AddrNotAvail, counter, key, fabric.Uint64, fabric.OpSum, "add"); err != nil {
			return err
		}
		if _, err := next(ctx, cq); err != nil {
			return err
		}
		before := binary.NativeEndian.Uint64(result)
		if err := ep.FetchAtomic(nil, nil, result, mr.Desc(), fabric.AddrNotAvail, counter, key, fabric.Uint64, fabric.OpAtomicRead, "read"); err != nil {
			return err
		}
		if _, err := next(ctx, cq); err != nil {
			return err
		}
		fmt.Printf("fetch-and-add 5: %d before, %d after\n", before, binary.NativeEndian.Uint64(result))
	}
	n = copy(out, "written")
	if err := ep.SendMsg(&fabric.Msg{Buf: out[:n], Desc: mr.Desc(), Context: "done"}, fabric.FlagDeliveryComplete); err != nil {
		return err
	}
	if _, err := next(ctx, cq); err != nil {
		return err
	}
	// The server shuts the connection down when it has seen everything.
	for {
		ev, err := eq.SRead(ctx)
		if err != nil {
			return err
		}
		if ev.Event == fabric.EventShutdown {
			fmt.Println("FI_SHUTDOWN")
			return nil
		}
		var c [1]fabric.CQEntry
		cq.Read(c[:])
	}
}

func next(ctx context.Context, cq *fabric.CQ) (fabric.CQEntry, error) {
	var c [1]fabric.CQEntry
	if _, err := cq.SRead(ctx, c[:]); err != nil {
		if e, rerr := cq.ReadErr(); rerr == nil {
			return c[0], fmt.Errorf("completion error: %w", e.Err)
		}
		return c[0], err
	}
	return c[0], nil
}
