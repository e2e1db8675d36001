//go:build rdmacore && linux && cgo

package rdmacore

import (
	"errors"
	"syscall"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// These need no device: they pin down how Go values cross to C and back.

func TestAddressVectorsSurviveTheTripThroughC(t *testing.T) {
	for _, a := range []verbs.AHAttr{
		{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(mustAddr("10.77.0.12")), SGIDIndex: 1, HopLimit: 64, TrafficClass: 0x68, FlowLabel: 0xabcde}},
		{IsGlobal: true, PortNum: 2, SL: 3, StaticRate: 5, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(mustAddr("fd77::11")), SGIDIndex: 2, HopLimit: 1}},
		{DLID: 0x1234, SrcPathBits: 7},
	} {
		c := cAHAttr(&a)
		if got := goAHAttr(&c); got != a {
			t.Errorf("AH attr %+v came back as %+v", a, got)
		}
	}
}

func TestQPAttributesSurviveTheTripThroughC(t *testing.T) {
	a := verbs.QPAttr{QPState: verbs.QPSRTS, CurQPState: verbs.QPSRTR, PathMTU: verbs.MTU4096, QKey: 0x11111111,
		RQPSN: 0xabcdef, SQPSN: 0x123456, DestQPNum: 0x11, QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		Cap:       verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInlineData: 5},
		AHAttr:    verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(mustAddr("10.0.0.1")), HopLimit: 64}},
		PKeyIndex: 1, MaxRdAtomic: 16, MaxDestRdAtomic: 8, MinRNRTimer: 12, PortNum: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 6, RateLimit: 9}
	c := cQPAttr(&a)
	if got := goQPAttr(&c); got != a {
		t.Errorf("QP attr\n%+v came back as\n%+v", a, got)
	}
}

func TestErrnosKeepTheirNumbers(t *testing.T) {
	for _, c := range []struct {
		err  error
		want verbs.Errno
	}{
		{syscall.EINVAL, verbs.ErrInvalidArgument},
		{syscall.ENOMEM, verbs.ErrNoMemory},
		{syscall.EBUSY, verbs.ErrBusy},
		{errors.New("not an errno"), verbs.ErrIO},
		{nil, verbs.ErrIO},
	} {
		if got := errnoOf(c.err); got != c.want {
			t.Errorf("errnoOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if err := fail("ibv_alloc_pd", syscall.ENOMEM); !errors.Is(err, verbs.ErrNoMemory) || err.Error() != "ibv_alloc_pd: cannot allocate memory" {
		t.Errorf("fail: %v", err)
	}
}

func TestDeviceListWorksWithoutDevices(t *testing.T) {
	devs, err := provider{}.Devices()
	if err != nil {
		t.Fatalf("listing rdma-core devices: %v (a host without RDMA must list none)", err)
	}
	for _, d := range devs {
		if _, ok := verbs.DeviceDriverOf(d).(*device); !ok || !(backend{}).Serves(d) {
			t.Errorf("%s is not served by the rdma-core backend", d.Name())
		}
	}
}

func TestForkInitIsLibibverbs(t *testing.T) {
	if err := verbs.ForkInit(); err != nil {
		t.Fatalf("ibv_fork_init: %v", err)
	}
}
