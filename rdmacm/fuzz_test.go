package rdmacm

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// FuzzAgentReceive feeds arbitrary MADs to a device's connection manager
// while it listens and holds a connection: nothing may panic, and the
// connection tables must stay consistent. Flags in the first input byte
// patch the MAD's communication IDs with the live connection's, so that
// the fuzzer reaches the state machine and not just the lookups.
func FuzzAgentReceive(f *testing.F) {
	for _, m := range []mad.Message{
		&mad.REQ{LocalCommID: 1, ServiceID: mad.MakeServiceID(mad.PortSpaceTCP, 7490), LocalQPN: 0x99, PKey: 0xffff, PathMTU: mad.MTU1024,
			Primary: mad.Path{LocalGID: mad.GIDFromAddr(netip.MustParseAddr("10.6.0.1")), RemoteGID: mad.GIDFromAddr(netip.MustParseAddr("10.6.0.2"))}},
		&mad.REP{LocalQPN: 0x42}, &mad.RTU{}, &mad.MRA{ServiceTimeout: 3}, &mad.REJ{Reason: mad.RejectConsumerDefined},
		&mad.DREQ{}, &mad.DREP{}, &mad.SIDRREQ{ServiceID: mad.MakeServiceID(mad.PortSpaceUDP, 7490)}, &mad.SIDRREP{},
	} {
		if r, ok := m.(*mad.REQ); ok {
			r.SetCMAPrivateData(&mad.CMAHeader{Port: 5000, Src: netip.MustParseAddr("10.6.0.1"), Dst: netip.MustParseAddr("10.6.0.2")}, nil)
		}
		b, err := mad.Marshal(mad.Header{BaseVersion: 1, MgmtClass: mad.MgmtClassCM, ClassVersion: 2, Method: mad.MethodSend, AttrID: m.AttrID()}, m)
		if err != nil {
			f.Fatal(err)
		}
		for _, flags := range []byte{0, 1, 3} {
			f.Add(append([]byte{flags}, b...))
		}
	}
	f.Add([]byte{0})

	n := link.NewNetwork(1)
	cliAddr, srvAddr := netip.MustParseAddr("10.6.0.1"), netip.MustParseAddr("10.6.0.2")
	for _, a := range []netip.Addr{cliAddr, srvAddr} {
		l, _ := n.Attach(a)
		dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(RegisterDevice(dev))
	}
	sch, cch := newChannel(), newChannel()
	lis, _ := CreateID(sch, nil, PSTCP)
	defer lis.Destroy()
	lis.BindAddr(netip.AddrPortFrom(srvAddr, 7490))
	lis.Listen(8)
	ulis, _ := CreateID(sch, nil, PSUDP)
	defer ulis.Destroy()
	ulis.BindAddr(netip.AddrPortFrom(srvAddr, 7490))
	ulis.Listen(8)
	cli, _ := CreateID(cch, nil, PSTCP)
	defer cli.Destroy()
	cli.ResolveAddr(netip.AddrPortFrom(cliAddr, 0), netip.AddrPortFrom(srvAddr, 7490), time.Second)
	cli.ResolveRoute(time.Second)
	cli.CreateQP(nil, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	cli.SetCMTimeouts(8, 1)
	cli.Connect(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ev, err := sch.GetEvent(ctx)
		if err != nil {
			f.Fatal(err)
		}
		if ev.Type == EventConnectRequest {
			ev.ID.CreateQP(nil, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			ev.ID.Accept(nil)
			defer ev.ID.Destroy()
			break
		}
	}
	lk := ibcmOf(lis)
	cm.mu.Lock()
	srvAgent := lk.agent
	cmUnlock()

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		flags, m := data[0], append([]byte(nil), data[1:]...)
		k := ibcmOf(cli)
		cm.mu.Lock()
		c := k.c
		cmUnlock()
		if len(m) >= mad.HeaderLen+8 {
			if flags&1 != 0 {
				binary.BigEndian.PutUint32(m[mad.HeaderLen:], c.localID)
			}
			if flags&2 != 0 {
				binary.BigEndian.PutUint32(m[mad.HeaderLen+4:], c.remoteID)
			}
		}
		grh := make([]byte, verbs.GRHLen)
		ip := grh[20:]
		ip[0] = 0x45
		copy(ip[12:16], cliAddr.AsSlice())
		copy(ip[16:20], srvAddr.AsSlice())
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(ip[i])<<8 | uint32(ip[i+1])
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		srvAgent.receive(append(grh, m...))

		cm.mu.Lock()
		defer cmUnlock()
		for k, id := range srvAgent.conns {
			if id.c.localID != k || !id.c.registered {
				t.Fatalf("conns[%#x] holds an ID with local ID %#x (registered %v)", k, id.c.localID, id.c.registered)
			}
		}
	})
}
