package verbs_test

import (
	"errors"
	"testing"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// plainCQContext is cqContext with CQs that only poll: no StartPoll of
// their own, so CreateCQEx reads them through Poll.
type plainCQContext struct{ cqContext }

type plainCQ struct{ verbs.CQDriver }

func (plainCQContext) CreateCQ(cqe int, notify func()) (verbs.CQDriver, error) {
	return plainCQ{swcq.New(cqe, notify)}, nil
}

type plainCQDevice struct{}

func (plainCQDevice) Open(verbs.EventSink) (verbs.ContextDriver, error) { return plainCQContext{}, nil }

func openContext(t testing.TB, drv verbs.DeviceDriver) *verbs.Context {
	t.Helper()
	ctx, err := verbs.NewDevice("ex_test", 1, drv).Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// newTestCQEx makes an extended CQ on a provider without extended CQs of
// its own and returns what the provider pushes completions into.
func newTestCQEx(t testing.TB, drv verbs.DeviceDriver, flags verbs.CreateCQWCFlags) (*verbs.CQEx, *swcq.CQ) {
	t.Helper()
	cq, err := openContext(t, drv).CreateCQEx(&verbs.CQInitAttrEx{CQE: 64, WCFlags: flags, CQContext: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := verbs.CQDriverOf(cq.CQ).(*swcq.CQ)
	if !ok {
		p = verbs.CQDriverOf(cq.CQ).(plainCQ).CQDriver.(*swcq.CQ)
	}
	return cq, p
}

// Without extended CQs of its own, a provider offers the standard fields
// and nothing else; what no device has fails as ibv_create_cq_ex does.
func TestCreateCQExRefusesWhatTheDeviceCannotProvide(t *testing.T) {
	ctx := openContext(t, cqDevice{})
	for _, c := range []struct {
		name string
		attr verbs.CQInitAttrEx
		want error // nil: created
	}{
		{"standard fields", verbs.CQInitAttrEx{CQE: 8, WCFlags: verbs.WCStandardFlags}, nil},
		{"timestamps", verbs.CQInitAttrEx{CQE: 8, WCFlags: verbs.WCExWithCompletionTimestamp}, verbs.ErrNotSupported},
		{"wall-clock timestamps", verbs.CQInitAttrEx{CQE: 8, WCFlags: verbs.WCExWithCompletionTimestampWallclock}, verbs.ErrNotSupported},
		{"flow tag", verbs.CQInitAttrEx{CQE: 8, WCFlags: verbs.WCExWithFlowTag}, verbs.ErrNotSupported},
		{"bit beyond libibverbs'", verbs.CQInitAttrEx{CQE: 8, WCFlags: 1 << 40}, verbs.ErrNotSupported},
		{"ignore overrun", verbs.CQInitAttrEx{CQE: 8, CompMask: verbs.CQInitAttrMaskFlags, Flags: verbs.CreateCQAttrIgnoreOverrun}, verbs.ErrNotSupported},
		{"flags without their comp_mask bit are ignored", verbs.CQInitAttrEx{CQE: 8, Flags: verbs.CreateCQAttrIgnoreOverrun}, nil},
		{"single threaded", verbs.CQInitAttrEx{CQE: 8, CompMask: verbs.CQInitAttrMaskFlags, Flags: verbs.CreateCQAttrSingleThreaded}, nil},
		{"parent domain", verbs.CQInitAttrEx{CQE: 8, CompMask: verbs.CQInitAttrMaskPD}, verbs.ErrNotSupported},
		{"too many entries", verbs.CQInitAttrEx{CQE: 4096}, verbs.ErrInvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			cq, err := ctx.CreateCQEx(&c.attr)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("CreateCQEx: %v, want %v", err, c.want)
			}
			if cq != nil {
				if err := cq.Destroy(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if _, err := ctx.CreateCQEx(nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("nil attributes: %v", err)
	}
}

// StartPoll and NextPoll walk the queue one completion at a time, each
// taken once, and report ENOENT when it is empty, whether the provider's
// CQ polls one at a time itself or only in batches.
func TestCQExPollsEachCompletionOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		drv  verbs.DeviceDriver
	}{{"swcq", cqDevice{}}, {"poll only", plainCQDevice{}}} {
		t.Run(c.name, func(t *testing.T) {
			cq, p := newTestCQEx(t, c.drv, verbs.WCExWithByteLen|verbs.WCExWithQPNum)
			if cq.CQContext() != "mine" {
				t.Errorf("cq_context %v", cq.CQContext())
			}
			if err := cq.StartPoll(nil); !errors.Is(err, verbs.ErrNoEntry) {
				t.Fatalf("StartPoll on an empty CQ: %v, want ENOENT", err)
			}
			cq.EndPoll() // harmless outside a batch
			for i := range 3 {
				p.Push(&verbs.WC{WRID: uint64(i), Opcode: verbs.WCRecv, ByteLen: uint32(10 * i), ImmData: 7, QPNum: 0x11,
					WCFlags: verbs.WCWithImm, SrcQP: 5, SL: 1}, false)
			}
			p.Push(&verbs.WC{WRID: 3, Status: verbs.WCRemAccessErr, VendorErr: 0x42}, false)
			if err := cq.StartPoll(nil); err != nil {
				t.Fatal(err)
			}
			for i := 0; ; i++ {
				if i < 3 {
					if cq.WRID != uint64(i) || cq.Status != verbs.WCSuccess || cq.ReadOpcode() != verbs.WCRecv || cq.ReadByteLen() != uint32(10*i) ||
						cq.ReadQPNum() != 0x11 || cq.ReadWCFlags() != verbs.WCWithImm {
						t.Errorf("completion %d: wr_id %d %s %s len %d qp %#x", i, cq.WRID, cq.ReadOpcode(), cq.Status, cq.ReadByteLen(), cq.ReadQPNum())
					}
					// Fields the CQ was not created with read as 0.
					if cq.ReadImmData() != 0 || cq.ReadSrcQP() != 0 || cq.ReadSL() != 0 || cq.ReadCompletionTS() != 0 {
						t.Errorf("completion %d: fields not asked for read as %d %d %d %d", i, cq.ReadImmData(), cq.ReadSrcQP(), cq.ReadSL(), cq.ReadCompletionTS())
					}
				}
				err := cq.NextPoll()
				if i < 3 && err != nil {
					t.Fatalf("NextPoll after completion %d: %v", i, err)
				}
				if i == 3 {
					if cq.WRID != 3 || cq.Status != verbs.WCRemAccessErr || cq.ReadVendorErr() != 0x42 {
						t.Errorf("error completion: wr_id %d %s vendor_err %#x", cq.WRID, cq.Status, cq.ReadVendorErr())
					}
					if !errors.Is(err, verbs.ErrNoEntry) {
						t.Fatalf("NextPoll past the last: %v, want ENOENT", err)
					}
					break
				}
			}
			cq.EndPoll()
			if n := cq.Len(); n != 0 {
				t.Errorf("%d completions left after reading them all", n)
			}
			if err := cq.NextPoll(); !errors.Is(err, verbs.ErrInvalidArgument) {
				t.Errorf("NextPoll after EndPoll: %v, want EINVAL", err)
			}
		})
	}
}

// Polling allocates nothing per completion, nor when the CQ is empty.
func TestCQExPollDoesNotAllocate(t *testing.T) {
	if racesync.Enabled {
		t.Skip("the race detector allocates")
	}
	cq, p := newTestCQEx(t, cqDevice{}, verbs.WCStandardFlags)
	wc := verbs.WC{WRID: 1, ByteLen: 64}
	allocs := testing.AllocsPerRun(100, func() {
		for range 8 {
			p.Push(&wc, false)
		}
		n := 0
		for err := cq.StartPoll(nil); err == nil; err = cq.NextPoll() {
			n += int(cq.ReadByteLen())
		}
		cq.EndPoll()
		cq.StartPoll(nil) // empty
		if n != 8*64 {
			t.Fatalf("read %d bytes' worth", n)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch of 8 completions", allocs)
	}
}

func BenchmarkCQExPoll(b *testing.B) {
	cq, p := newTestCQEx(b, cqDevice{}, verbs.WCStandardFlags)
	wc := verbs.WC{WRID: 1, ByteLen: 64}
	b.ReportAllocs()
	for b.Loop() {
		p.Push(&wc, false)
		if err := cq.StartPoll(nil); err != nil {
			b.Fatal(err)
		}
		_ = cq.ReadByteLen()
		cq.EndPoll()
	}
}
