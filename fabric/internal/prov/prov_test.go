package prov

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/rdmago/rdmago/fabric"
)

func TestAddrsFollowNodeServiceFlagsAndHints(t *testing.T) {
	local, peer := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	withSrc := fabric.AllocInfo()
	withSrc.SrcAddr = netip.MustParseAddrPort("10.0.0.1:4000")
	for _, c := range []struct {
		name          string
		node, service string
		nodeAddr      netip.Addr
		flags         uint64
		hints         *fabric.Info
		src, dst      string
	}{
		{"FI_SOURCE names the local side", "10.0.0.1", "9228", local, fabric.FlagSource, nil, "10.0.0.1:9228", "invalid AddrPort"},
		{"a node without FI_SOURCE is the peer", "10.0.0.2", "9228", peer, 0, nil, "invalid AddrPort", "10.0.0.2:9228"},
		{"nothing asked, nothing set", "", "", netip.Addr{}, 0, nil, "invalid AddrPort", "invalid AddrPort"},
		{"a hinted source keeps its port", "10.0.0.2", "9228", peer, 0, withSrc, "10.0.0.1:4000", "10.0.0.2:9228"},
	} {
		i := Addrs(fabric.AllocInfo(), local, c.node, c.service, c.nodeAddr, 9228, c.flags, c.hints)
		if i.SrcAddr.String() != c.src || i.DestAddr.String() != c.dst {
			t.Errorf("%s: src %v dst %v, want %s %s", c.name, i.SrcAddr, i.DestAddr, c.src, c.dst)
		}
	}
}

func TestClosingIsTrueOnce(t *testing.T) {
	var mu sync.Mutex
	closed := false
	if !Closing(&mu, &closed) || Closing(&mu, &closed) || !closed {
		t.Fatal("Closing must be true for the first call only")
	}
}

func TestNoTaggedRefusesEveryTaggedCall(t *testing.T) {
	var n NoTagged
	for _, err := range []error{
		n.TRecv(nil, nil, 0, 0, 0, nil), n.TSend(nil, nil, 0, 0, nil), n.TSendMsg(&fabric.Msg{}, 0, 0), n.TInject(nil, 0, 0),
	} {
		if !errors.Is(err, fabric.ErrNotSupported) {
			t.Errorf("%v, want ErrNotSupported", err)
		}
	}
	if _, err := GetOpt(fabric.OptMinMultiRecv, 55); !errors.Is(err, fabric.ErrNoProtoOpt) {
		t.Errorf("GetOpt of another option: %v", err)
	}
	if n, err := GetOpt(fabric.OptCMDataSize, 55); n != 55 || err != nil {
		t.Errorf("GetOpt(FI_OPT_CM_DATA_SIZE) = %d, %v", n, err)
	}
}
