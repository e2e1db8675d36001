package rdmacm_test

import (
	"errors"
	"net/netip"
	"reflect"
	"strconv"
	"testing"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

func TestGetAddrInfo(t *testing.T) {
	ap := netip.MustParseAddrPort
	src := ap("10.0.0.9:0")
	tests := []struct {
		name          string
		node, service string
		hints         *rdmacm.AddrInfo
		want          []rdmacm.AddrInfo
		err           error
	}{
		{
			name: "numeric IPv4, no hints", node: "10.0.0.1", service: "7471",
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, DstAddr: ap("10.0.0.1:7471")}},
		},
		{
			name: "numeric IPv6", node: "fd00::1", service: "18515",
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet6, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, DstAddr: ap("[fd00::1]:18515")}},
		},
		{
			name: "IPv4-mapped IPv6 is IPv4", node: "::ffff:10.0.0.1", service: "1",
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, DstAddr: ap("10.0.0.1:1")}},
		},
		{
			name: "source from hints", node: "10.0.0.1", service: "7471", hints: &rdmacm.AddrInfo{SrcAddr: src},
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, SrcAddr: src, DstAddr: ap("10.0.0.1:7471")}},
		},
		{
			name: "passive", node: "10.0.0.2", service: "7471", hints: &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive},
			want: []rdmacm.AddrInfo{{Flags: rdmacm.RAIPassive, Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, SrcAddr: ap("10.0.0.2:7471")}},
		},
		{
			name: "passive, any address", service: "7471", hints: &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive},
			want: []rdmacm.AddrInfo{
				{Flags: rdmacm.RAIPassive, Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, SrcAddr: ap("0.0.0.0:7471")},
				{Flags: rdmacm.RAIPassive, Family: rdmacm.AFInet6, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, SrcAddr: ap("[::]:7471")},
			},
		},
		{
			name: "passive, any IPv4 address", service: "7471", hints: &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive | rdmacm.RAIFamily, Family: rdmacm.AFInet},
			want: []rdmacm.AddrInfo{{Flags: rdmacm.RAIPassive, Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, SrcAddr: ap("0.0.0.0:7471")}},
		},
		{
			name: "active, no node: loopback", service: "7471", hints: &rdmacm.AddrInfo{Family: rdmacm.AFInet},
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, DstAddr: ap("127.0.0.1:7471")}},
		},
		{
			name: "no service: port 0", node: "10.0.0.1",
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, DstAddr: ap("10.0.0.1:0")}},
		},
		{
			name: "service name", node: "10.0.0.1", service: "https",
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, DstAddr: ap("10.0.0.1:443")}},
		},
		{
			name: "UD picks the UDP port space", node: "10.0.0.1", service: "7471", hints: &rdmacm.AddrInfo{QPType: verbs.QPTUD},
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTUD, PortSpace: rdmacm.PSUDP, DstAddr: ap("10.0.0.1:7471")}},
		},
		{
			name: "UDP port space picks UD", node: "10.0.0.1", service: "7471", hints: &rdmacm.AddrInfo{PortSpace: rdmacm.PSUDP},
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTUD, PortSpace: rdmacm.PSUDP, DstAddr: ap("10.0.0.1:7471")}},
		},
		{
			name: "UC in the TCP port space", node: "10.0.0.1", service: "7471", hints: &rdmacm.AddrInfo{QPType: verbs.QPTUC},
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTUC, PortSpace: rdmacm.PSTCP, DstAddr: ap("10.0.0.1:7471")}},
		},
		{
			name: "hints only", hints: &rdmacm.AddrInfo{DstAddr: ap("10.0.0.3:9"), SrcAddr: src, QPType: verbs.QPTRC},
			want: []rdmacm.AddrInfo{{Family: rdmacm.AFInet, QPType: verbs.QPTRC, PortSpace: rdmacm.PSTCP, SrcAddr: src, DstAddr: ap("10.0.0.3:9")}},
		},
		{name: "nothing", err: verbs.ErrInvalidArgument},
		{name: "RC in the UDP port space", node: "10.0.0.1", hints: &rdmacm.AddrInfo{QPType: verbs.QPTRC, PortSpace: rdmacm.PSUDP}, err: verbs.ErrInvalidArgument},
		{name: "raw packet QP", node: "10.0.0.1", hints: &rdmacm.AddrInfo{QPType: verbs.QPTRawPacket}, err: verbs.ErrNotSupported},
		{name: "AF_IB", node: "fd00::1", hints: &rdmacm.AddrInfo{Flags: rdmacm.RAIFamily | rdmacm.RAINumericHost, Family: rdmacm.AFIB}, err: verbs.ErrNotSupported},
		{name: "unknown family", node: "10.0.0.1", hints: &rdmacm.AddrInfo{Family: 99}, err: verbs.ErrInvalidArgument},
		{name: "family filters everything out", node: "fd00::1", hints: &rdmacm.AddrInfo{Family: rdmacm.AFInet}, err: verbs.ErrNoEntry},
		{name: "numeric host that is a name", node: "localhost", hints: &rdmacm.AddrInfo{Flags: rdmacm.RAINumericHost}, err: verbs.ErrInvalidArgument},
		{name: "port out of range", node: "10.0.0.1", service: "65536", err: verbs.ErrNoEntry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rdmacm.GetAddrInfo(tc.node, tc.service, tc.hints)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want one wrapping %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var vals []rdmacm.AddrInfo
			for _, ai := range got {
				vals = append(vals, *ai)
			}
			if !reflect.DeepEqual(vals, tc.want) {
				t.Errorf("got\n\t%v\nwant\n\t%v", vals, tc.want)
			}
		})
	}
}

// TestGetAddrInfoName resolves a host name with the Go resolver.
func TestGetAddrInfoName(t *testing.T) {
	got, err := rdmacm.GetAddrInfo("localhost", "7471", &rdmacm.AddrInfo{Family: rdmacm.AFInet})
	if err != nil {
		t.Skipf("no resolver for localhost here: %v", err)
	}
	for _, ai := range got {
		if !ai.DstAddr.Addr().IsLoopback() || ai.DstAddr.Port() != 7471 || ai.DstCanonName != "localhost" || ai.Family != rdmacm.AFInet {
			t.Errorf("localhost resolved to %v (%q)", ai, ai.DstCanonName)
		}
	}
}

func TestCreateEPErrors(t *testing.T) {
	if _, err := rdmacm.CreateEP(nil, nil, nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("nil address information: %v", err)
	}
	if _, err := rdmacm.CreateEP(&rdmacm.AddrInfo{}, nil, nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("no destination: %v", err)
	}
	// 192.0.2.0/24 is TEST-NET-1: no device here serves it.
	res := &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive, SrcAddr: netip.MustParseAddrPort("192.0.2.77:7471")}
	if _, err := rdmacm.CreateEP(res, nil, nil); err == nil {
		t.Error("a passive endpoint bound an address no device serves")
	}
	res = &rdmacm.AddrInfo{QPType: verbs.QPTUD, PortSpace: rdmacm.PSTCP, DstAddr: netip.MustParseAddrPort("192.0.2.1:1")}
	if _, err := rdmacm.CreateEP(res, nil, nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("UD in the TCP port space: %v", err)
	}
}

// TestCreateEPPassiveQP checks that the QP attributes given to a passive
// endpoint give every ID GetRequest returns a QP of the endpoint's type,
// on the PD given, and that CreateEP on an active endpoint reports the
// capabilities the device gave.
func TestCreateEPPassiveQP(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	ctx := vbCtx(t)

	// The server's PD: open the server's device through an ID bound to
	// its address.
	probe, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	vbMust(t, err)
	vbMust(t, probe.BindAddr(netip.AddrPortFrom(sa, 0)))
	pd, err := probe.Verbs().AllocPD()
	vbMust(t, err)
	defer probe.Destroy()
	defer pd.Dealloc()

	res, err := rdmacm.GetAddrInfo(sa.String(), "0", &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive})
	vbMust(t, err)
	attr := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 3, MaxRecvWR: 5, MaxSendSGE: 1, MaxRecvSGE: 1}, QPType: verbs.QPTUD}
	listen, err := rdmacm.CreateEP(res[0], pd, attr)
	vbMust(t, err)
	defer listen.DestroyEP()
	if listen.QP() != nil {
		t.Error("a passive endpoint has a QP of its own")
	}
	if attr.QPType != verbs.QPTUD {
		t.Error("CreateEP changed the caller's attributes of a passive endpoint")
	}
	vbMust(t, listen.Listen(0))

	got := make(chan *rdmacm.ID, 1)
	go func() {
		id, err := listen.GetRequest(ctx)
		if err != nil {
			t.Error(err)
		} else if err := id.Accept(nil); err != nil {
			t.Error(err)
		}
		got <- id
	}()

	res, err = rdmacm.GetAddrInfo(sa.String(), strconv.Itoa(int(listen.LocalAddr().Port())),
		&rdmacm.AddrInfo{SrcAddr: netip.AddrPortFrom(ca, 0)})
	vbMust(t, err)
	cattr := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	cli, err := rdmacm.CreateEP(res[0], nil, cattr)
	vbMust(t, err)
	defer cli.DestroyEP()
	if cli.QP() == nil || cli.QP().Type() != verbs.QPTRC || cattr.QPType != verbs.QPTRC {
		t.Fatalf("active endpoint QP %v, attributes' type %v", cli.QP(), cattr.QPType)
	}
	if cattr.Cap.MaxSendWR < 2 || cattr.Cap.MaxRecvWR < 2 {
		t.Errorf("capabilities given: %+v", cattr.Cap)
	}
	vbMust(t, cli.Connect(nil))
	srv := <-got
	if srv == nil {
		t.FailNow()
	}
	defer srv.DestroyEP()
	qp := srv.QP()
	if qp == nil || qp.Type() != verbs.QPTRC || srv.PD() != pd {
		t.Fatalf("request's QP %v on PD %p, want an RC QP on %p", qp, srv.PD(), pd)
	}
	_, init, err := qp.Query()
	vbMust(t, err)
	if init.Cap.MaxSendWR < 3 || init.Cap.MaxRecvWR < 5 {
		t.Errorf("request's QP capabilities %+v", init.Cap)
	}
}
