// Command fabric_server is the server of seed 000's flow over a libfabric
// provider, in Go: fi_getinfo → fi_fabric → fi_domain → fi_av_open →
// fi_eq_open → fi_passive_ep → fi_listen → (FI_CONNREQ) → fi_endpoint →
// fi_mr_reg → fi_accept → fi_send / fi_recv, and it lets the client
// fi_write into its registered memory → fi_close.
//
// The provider is chosen at run time: -p tcp (the default), -p sockets
// (the provider the seed names, libfabric 1.17's sockets wire format over
// TCP, which upstream has since deprecated in favour of tcp) or -p verbs
// (rdma_cm and RDMA on a verbs device: rdmago's software RoCEv2 device
// here, a NIC with the rdmacore build tag). The program is written for
// all three: its buffers lie in registered memory whose descriptor every
// call gets (verbs needs FI_MR_LOCAL), and it tells the client the
// region's address as well as its key (verbs names remote memory by
// virtual address, tcp and sockets by offset, MR.Addr is 0). It pairs
// with fabric_client:
//
//	fabric_server -a 127.0.0.1 -port 9228 -p sockets &
//	fabric_client -a 127.0.0.1 -port 9228 -p sockets
package main

import (
	"bytes"
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
	addr = flag.String("a", "127.0.0.1", "address to listen on")
	port = flag.Int("port", 9228, "port to listen on")
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("fabric_server: ")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := serve(ctx); err != nil {
		log.Fatal(err)
	}
}

func serve(ctx context.Context) error {
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = *prov
	hints.EPAttr.Type = fabric.EPMsg
	hints.Caps = fabric.CapMsg | fabric.CapRMA
	infos, err := fabric.GetInfo(*addr, strconv.Itoa(*port), fabric.FlagSource, hints) // fi_getinfo
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
	av, err := dom.OpenAV(nil) // fi_av_open: the peers we hear from
	if err != nil {
		return err
	}
	defer av.Close()
	eq, err := fab.OpenEQ() // fi_eq_open
	if err != nil {
		return err
	}
	defer eq.Close()
	pep, err := fab.OpenPassiveEndpoint(info, nil) // fi_passive_ep
	if err != nil {
		return err
	}
	defer pep.Close()
	if err := pep.Bind(eq); err != nil {
		return err
	}
	if err := pep.Listen(); err != nil { // fi_listen
		return err
	}
	name, _ := pep.Name()
	fmt.Println("listening on", name, "with provider", info.FabricAttr.ProvName)

	req, err := eq.SRead(ctx) // FI_CONNREQ
	if err != nil {
		return err
	}
	if req.Event != fabric.EventConnReq {
		return fmt.Errorf("event %s, want FI_CONNREQ", req.Event)
	}
	if _, err := av.Insert(req.Info.DestAddr); err != nil { // fi_av_insert
		return err
	}
	fmt.Printf("connection request with %q\n", req.Data)
	cq, err := dom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatMsg}) // fi_cq_open
	if err != nil {
		return err
	}
	defer cq.Close()
	ep, err := dom.OpenEndpoint(req.Info, nil) // fi_endpoint
	if err != nil {
		return err
	}
	defer ep.Close()
	for _, err := range []error{ep.BindEQ(eq), ep.BindCQ(cq, fabric.BindTransmit|fabric.BindRecv), ep.Enable()} {
		if err != nil {
			return err
		}
	}
	// One registration for everything: the region the client writes,
	// the receive buffer and the key message.
	mem := make([]byte, 4096+256+20)
	region, msg, keyMsg := mem[:4096], mem[4096:4096+256], mem[4096+256:]
	mr, err := dom.RegMR(mem, fabric.AccessSend|fabric.AccessRecv|fabric.AccessRemoteWrite|fabric.AccessRemoteRead, 0xbeef) // fi_mr_reg
	if err != nil {
		return err
	}
	defer mr.Close()
	if err := ep.Recv(msg, mr.Desc(), fabric.AddrNotAvail, "recv"); err != nil { // fi_recv, before the peer can send
		return err
	}
	if err := ep.Accept([]byte("accepted")); err != nil { // fi_accept
		return err
	}
	if ev, err := eq.SRead(ctx); err != nil || ev.Event != fabric.EventConnected {
		return fmt.Errorf("waiting for FI_CONNECTED: %v %v", ev.Event, err)
	}

	// Tell the client where it may write: the region's key, length and
	// address (fi_mr_key; the address is 0 where peers name offsets).
	binary.LittleEndian.PutUint64(keyMsg, mr.Key())
	binary.LittleEndian.PutUint32(keyMsg[8:], uint32(len(region)))
	binary.LittleEndian.PutUint64(keyMsg[12:], mr.Addr())
	if err := ep.Send(keyMsg, mr.Desc(), fabric.AddrNotAvail, "key"); err != nil { // fi_send
		return err
	}
	for sent, written := false, false; !sent || !written; {
		c, err := next(ctx, cq)
		if err != nil {
			return err
		}
		switch c.Context {
		case "key":
			sent = true
		case "recv":
			text := string(c.Buf)
			fmt.Printf("received %q\n", text)
			if text == "written" {
				// The client's fi_write (and, over verbs and sockets, its atomic on
				// the region's last 8 bytes) came before this message.
				text := region[:len(region)-8]
				fmt.Printf("region holds %q", bytes.TrimRight(text, "\x00"))
				if c := binary.NativeEndian.Uint64(region[len(region)-8:]); c != 0 {
					fmt.Printf(", counter %d", c)
				}
				fmt.Println()
				written = true
			} else if err := ep.Recv(msg, mr.Desc(), fabric.AddrNotAvail, "recv"); err != nil {
				return err
			}
		}
	}
	if err := ep.Shutdown(); err != nil { // fi_shutdown
		return err
	}
	// Wait for the connection to be down at both ends (FI_SHUTDOWN here
	// too) before fi_close tears down what carries the disconnect.
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		ev, err := eq.SRead(wait)
		if err != nil || ev.Event == fabric.EventShutdown {
			return nil
		}
	}
}

// next waits for one completion (fi_cq_sread), reporting an error entry
// (fi_cq_readerr) as an error.
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
