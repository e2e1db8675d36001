//go:build linux

package rxe

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// sharedDevice makes a device on 127.0.0.1 at port, as the registry does
// for a process: several such devices in one test share the address as
// processes do, each under an owner number of its own.
func sharedDevice(t *testing.T, name string, port uint16) *verbs.Device {
	t.Helper()
	dev, err := NewDevice(Config{Name: name, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Port: port, NetdevMTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// writeAndCheck has a RDMA WRITE n bytes into b's buffer and checks them.
func writeAndCheck(t *testing.T, a, b *end, n int, seed byte) {
	t.Helper()
	fill(a.buf[:n], seed)
	err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(seed), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	if err != nil {
		t.Fatal(err)
	}
	if wc := a.wait(1, 10*time.Second)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("RDMA WRITE: %s", wc.Status)
	}
	if !bytes.Equal(a.buf[:n], b.buf[:n]) {
		t.Fatal("the written bytes differ")
	}
}

// Devices on one address share it as Linux's Soft-RoCE device is shared:
// each gets QP numbers in a range of its own, the one holding the port
// hands the others their packets, and when it goes another takes the port
// over while a newcomer takes the free owner number.
func TestDevicesShareAnAddress(t *testing.T) {
	port := udpPort()
	o := pairOpts{}
	o.defaults()
	a := newEndOn(t, sharedDevice(t, "rxe_share_a", port), &o)
	devB := sharedDevice(t, "rxe_share_b", port)
	b := newEndOn(t, devB, &o)
	if a.qp.Num()>>16 == b.qp.Num()>>16 {
		t.Fatalf("QP numbers %#x and %#x have the same owner", a.qp.Num(), b.qp.Num())
	}
	connect(t, a, b, &o)
	writeAndCheck(t, a, b, 1<<20, 1) // the follower receives
	writeAndCheck(t, b, a, 1<<20, 2) // the leader receives
	a.close()                        // the leader goes

	c := newEndOn(t, sharedDevice(t, "rxe_share_c", port), &o)
	b2 := newEndOn(t, devB, &o)
	defer b.close()
	defer b2.close()
	defer c.close()
	if c.qp.Num()>>16 != a.qp.Num()>>16 {
		t.Errorf("the newcomer's QP %#x did not take the free owner number of %#x", c.qp.Num(), a.qp.Num())
	}
	connect(t, b2, c, &o)
	writeAndCheck(t, b2, c, 64<<10, 3)
	writeAndCheck(t, c, b2, 64<<10, 4)
}

type fakeServices map[uint64]uint8

func (f fakeServices) ServiceOwner(id uint64) (uint8, bool, bool) {
	o, ok := f[id]
	return o, ok, false
}

// route never reads past a packet, whatever arrives for QP1, and sends
// the answers to our CM messages to the owner their IDs name.
func FuzzRoute(f *testing.F) {
	mad := func(attr uint16, commID uint32) []byte {
		p := make([]byte, madOffset+256+4)
		p[7] = gsiQPN
		p[madOffset+1] = mgmtClassCM
		p[madOffset+16], p[madOffset+17] = byte(attr>>8), byte(attr)
		cm := madOffset + madHeaderLen
		p[cm+cmRemoteIDOff] = byte(commID >> 24)
		p[cm] = byte(commID >> 24)
		return p
	}
	f.Add(mad(0x13, 0x05000001)) // REP to owner 5
	f.Add(mad(cmAttrREQ, 0))
	f.Add(mad(cmAttrSIDRREP, 0x07000000))
	f.Add([]byte{0, 0, 0, 0, 0, 0x12, 0x34, 0x56})
	h := &hw{owner: 3}
	svc := fakeServices{0x1061c8e: 9}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < 8 {
			return
		}
		o, _ := h.route(svc, pkt)
		qpn := uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7])
		if qpn != gsiQPN && o != uint8(qpn>>16) {
			t.Fatalf("QPN %#x routed to owner %d", qpn, o)
		}
	})
}

func TestRouteSendsCMAnswersToTheirOwner(t *testing.T) {
	h := &hw{owner: 3}
	p := make([]byte, madOffset+256+4)
	p[7] = gsiQPN
	p[madOffset+1] = mgmtClassCM
	p[madOffset+17] = 0x13 // REP
	p[madOffset+madHeaderLen+cmRemoteIDOff] = 5
	if o, _ := h.route(fakeServices{}, p); o != 5 {
		t.Errorf("REP for comm ID 0x05...: owner %d, want 5", o)
	}
	p[madOffset+17] = cmAttrREQ
	copy(p[madOffset+madHeaderLen+cmServiceIDOff:], []byte{0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x8e})
	if o, _ := h.route(fakeServices{0x1061c8e: 9}, p); o != 9 {
		t.Errorf("REQ for a claimed service: owner %d, want 9", o)
	}
	if o, _ := h.route(fakeServices{}, p); o != 3 {
		t.Errorf("REQ for an unclaimed service: owner %d, want ours (3)", o)
	}
}
