package verbs_test

import (
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/verbs"
)

// recDevice is a provider whose QPs record the send work requests posted
// to them, copying inline data from its registered memory at post time as
// a device does. With batch its QPs are BatchPosters.
type recDevice struct{ batch bool }

func (d recDevice) Open(verbs.EventSink) (verbs.ContextDriver, error) {
	return &recContext{batch: d.batch, mrs: map[uint32]*recMR{}}, nil
}

type recContext struct {
	cqContext
	batch bool

	mu   sync.Mutex
	mrs  map[uint32]*recMR // by lkey
	keys uint32
}

func (c *recContext) QueryDevice() (verbs.DeviceAttr, error) {
	return verbs.DeviceAttr{MaxCQE: 1024, AtomicCap: verbs.AtomicHCA,
		DeviceCapFlags: verbs.DeviceMemWindow | verbs.DeviceMemWindowType2B | verbs.DeviceMemMgtExtensions}, nil
}

func (c *recContext) AllocPD() (verbs.PDDriver, error) { return recPD{c}, nil }

type recPD struct{ c *recContext }

// recMR is a region at a made-up address: 1<<32 times its key.
type recMR struct {
	c   *recContext
	key uint32
	buf []byte
}

func (m *recMR) Keys() (uint32, uint32) { return m.key, m.key }
func (m *recMR) Addr() uint64           { return uint64(m.key) << 32 }
func (m *recMR) Dereg() error {
	m.c.mu.Lock()
	delete(m.c.mrs, m.key)
	m.c.mu.Unlock()
	return nil
}

func (p recPD) RegMR(buf []byte, _ verbs.AccessFlags) (verbs.MRDriver, error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys++
	m := &recMR{c: c, key: c.keys, buf: buf}
	c.mrs[m.key] = m
	return m, nil
}

func (p recPD) CreateQP(attr *verbs.QPInitAttr) (verbs.QPDriver, error) {
	attr.Cap.MaxSendSGE = max(attr.Cap.MaxSendSGE, 1)
	q := &recQP{c: p.c}
	if p.c.batch {
		return &batchQP{q}, nil
	}
	return q, nil
}

func (recPD) CreateAH(*verbs.AHAttr) (verbs.AHDriver, error) { return nil, verbs.ErrNotSupported }
func (recPD) CreateSRQ(*verbs.SRQInitAttr) (verbs.SRQDriver, error) {
	return nil, verbs.ErrNotSupported
}
func (recPD) AllocMW(verbs.MWType) (verbs.MWDriver, error) { return nil, verbs.ErrNotSupported }
func (recPD) Dealloc() error                               { return nil }

// recWR is a posted request as the device took it.
type recWR struct {
	wr     verbs.SendWR
	inline string
}

type recQP struct {
	c       *recContext
	refuse  uint64 // a request with this wr_id is refused (0: none)
	discard bool   // count the requests, record nothing
	n       int
	posts   [][]recWR
}

// take checks and records one list; with all, none of it if one is
// refused.
func (q *recQP) take(wrs []verbs.SendWR, all bool) error {
	var got []recWR
	for i, w := range wrs {
		if q.refuse != 0 && w.WRID == q.refuse {
			if !all && i > 0 {
				q.posts = append(q.posts, got)
			}
			return &verbs.WRError{Index: i, WRID: w.WRID, Err: verbs.Errorf("ibv_post_send", verbs.ErrInvalidArgument, "refused")}
		}
		q.n++
		if q.discard {
			continue
		}
		r := recWR{wr: w}
		r.wr.SGList = append([]verbs.SGE(nil), w.SGList...)
		if w.SendFlags&verbs.SendInline != 0 {
			for _, s := range w.SGList {
				q.c.mu.Lock()
				m := q.c.mrs[s.LKey]
				q.c.mu.Unlock()
				if m == nil {
					return &verbs.WRError{Index: i, WRID: w.WRID, Err: verbs.Errorf("ibv_post_send", verbs.ErrInvalidArgument, "inline SGE of no region")}
				}
				off := s.Addr - m.Addr()
				r.inline += string(m.buf[off : off+uint64(s.Length)])
			}
		}
		got = append(got, r)
	}
	if !q.discard {
		q.posts = append(q.posts, got)
	}
	return nil
}

func (q *recQP) PostSend(wrs []verbs.SendWR) error            { return q.take(wrs, false) }
func (q *recQP) Num() uint32                                  { return 0x42 }
func (q *recQP) Modify(*verbs.QPAttr, verbs.QPAttrMask) error { return nil }
func (q *recQP) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	return verbs.QPAttr{}, verbs.QPInitAttr{}, nil
}
func (q *recQP) PostRecv([]verbs.RecvWR) error            { return nil }
func (q *recQP) AttachMcast(verbs.GID) error              { return verbs.ErrNotSupported }
func (q *recQP) DetachMcast(verbs.GID) error              { return verbs.ErrNotSupported }
func (q *recQP) Destroy() error                           { return nil }
func (q *batchQP) PostSendBatch(wrs []verbs.SendWR) error { return q.take(wrs, true) }

// batchQP is a recQP that posts all or none.
type batchQP struct{ *recQP }

// recQPOf returns the recorder behind qp.
func recQPOf(qp *verbs.QP) *recQP {
	switch d := verbs.QPDriverOf(qp).(type) {
	case *batchQP:
		return d.recQP
	case *recQP:
		return d
	}
	return nil
}

// recPDAndCQ opens a recording device with a PD and a CQ.
func recPDAndCQ(t testing.TB, d recDevice) (*verbs.Context, *verbs.PD, *verbs.CQ) {
	t.Helper()
	ctx := openContext(t, d)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, pd, cq
}

// newRecQP makes a QP on a recording device with every RC operation and
// 128 bytes of inline data.
func newRecQP(t testing.TB, batch bool) (*verbs.QP, *verbs.PD) {
	t.Helper()
	ctx, pd, cq := recPDAndCQ(t, recDevice{batch: batch})
	const all = verbs.QPExWithRDMAWrite | verbs.QPExWithRDMAWriteWithImm | verbs.QPExWithSend | verbs.QPExWithSendWithImm | verbs.QPExWithRDMARead |
		verbs.QPExWithAtomicCmpAndSwp | verbs.QPExWithAtomicFetchAndAdd | verbs.QPExWithLocalInv | verbs.QPExWithBindMW | verbs.QPExWithSendWithInv
	qp, err := ctx.CreateQPEx(&verbs.QPInitAttrEx{
		QPInitAttr: verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 64, MaxSendSGE: 4, MaxInlineData: 128}},
		CompMask:   verbs.QPInitAttrPD | verbs.QPInitAttrSendOpsFlags, PD: pd, SendOpsFlags: all})
	if err != nil {
		t.Fatal(err)
	}
	return qp, pd
}

// Nothing reaches the provider before WRComplete, which posts the batch
// as one list, each request with the wr_id and flags of its builder call.
func TestQPExPostsNothingUntilWRComplete(t *testing.T) {
	qp, _ := newRecQP(t, true)
	qx, rec := qp.QPEx(), recQPOf(qp)
	qx.WRStart()
	qx.WRID, qx.WRFlags = 1, verbs.SendSignaled|verbs.SendSolicited
	qx.WRSendImm(0xabc)
	qx.WRSetSGE(7, 0x1000, 64)
	qx.WRID, qx.WRFlags = 2, 0
	qx.WRRDMAWrite(0x99, 0x5000)
	qx.WRSetSGEList([]verbs.SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}})
	qx.WRID = 3
	qx.WRAtomicCmpSwp(0x98, 0x6000, 11, 12)
	qx.WRSetSGE(8, 0x2000, 8)
	qx.WRID = 4
	qx.WRLocalInv(0x1234)
	if len(rec.posts) != 0 {
		t.Fatalf("%d lists posted before WRComplete", len(rec.posts))
	}
	if err := qx.WRComplete(); err != nil {
		t.Fatal(err)
	}
	if len(rec.posts) != 1 || len(rec.posts[0]) != 4 {
		t.Fatalf("posted %d lists (%v), want one of 4 requests", len(rec.posts), rec.posts)
	}
	p := rec.posts[0]
	for i, c := range []struct {
		got, want verbs.SendWR
	}{
		{p[0].wr, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled | verbs.SendSolicited, ImmData: 0xabc}},
		{p[1].wr, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, RKey: 0x99, RemoteAddr: 0x5000}},
		{p[2].wr, verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicCmpAndSwp, RKey: 0x98, RemoteAddr: 0x6000, CompareAdd: 11, Swap: 12}},
		{p[3].wr, verbs.SendWR{WRID: 4, Opcode: verbs.WRLocalInv, InvalidateRKey: 0x1234}},
	} {
		got := c.got
		got.SGList = nil
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("request %d: %+v, want %+v", i, got, c.want)
		}
	}
	for i, want := range [][]verbs.SGE{{{Addr: 0x1000, Length: 64, LKey: 7}}, {{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}, {{Addr: 0x2000, Length: 8, LKey: 8}}, nil} {
		if got := p[i].wr.SGList; len(got) != len(want) || len(want) > 0 && (got[0] != want[0] || got[len(got)-1] != want[len(want)-1]) {
			t.Errorf("request %d: SGEs %+v, want %+v", i, got, want)
		}
	}
	// An empty batch posts nothing.
	qx.WRStart()
	if err := qx.WRComplete(); err != nil || len(rec.posts) != 1 {
		t.Errorf("empty batch: %v, %d lists posted", err, len(rec.posts))
	}
}

func TestWRAbortDropsTheBatch(t *testing.T) {
	qp, _ := newRecQP(t, true)
	qx, rec := qp.QPEx(), recQPOf(qp)
	qx.WRStart()
	qx.WRID = 1
	qx.WRSend()
	qx.WRSetInlineData([]byte("dropped"))
	qx.WRAbort()
	qx.WRAbort() // a second abort outside a batch does nothing
	qx.WRStart()
	qx.WRID = 2
	qx.WRSend()
	qx.WRSetInlineData([]byte("kept"))
	if err := qx.WRComplete(); err != nil {
		t.Fatal(err)
	}
	if len(rec.posts) != 1 || len(rec.posts[0]) != 1 || rec.posts[0][0].wr.WRID != 2 || rec.posts[0][0].inline != "kept" {
		t.Fatalf("posted %+v, want the second batch only", rec.posts)
	}
}

// A batch either reaches the send queue whole or not at all when the
// provider can post all or none; otherwise the error names the first
// request not posted, as ibv_post_send's bad_wr does.
func TestWRCompleteIsAllOrNoneWhenTheProviderCan(t *testing.T) {
	for _, c := range []struct {
		name       string
		batch      bool
		wantPosted int
	}{{"BatchPoster", true, 0}, {"PostSend only", false, 1}} {
		t.Run(c.name, func(t *testing.T) {
			qp, _ := newRecQP(t, c.batch)
			qx, rec := qp.QPEx(), recQPOf(qp)
			rec.refuse = 2
			qx.WRStart()
			for id := uint64(1); id <= 3; id++ {
				qx.WRID = id
				qx.WRSend()
			}
			err := qx.WRComplete()
			var we *verbs.WRError
			if !errors.As(err, &we) || we.Index != 1 || we.WRID != 2 {
				t.Fatalf("WRComplete: %v, want a *WRError for request 1 (wr_id 2)", err)
			}
			posted := 0
			for _, l := range rec.posts {
				posted += len(l)
			}
			if posted != c.wantPosted {
				t.Errorf("%d requests posted, want %d", posted, c.wantPosted)
			}
		})
	}
}

// The first mistake of a batch is what WRComplete returns, and nothing of
// the batch is posted.
func TestWRCompleteReportsTheFirstMistake(t *testing.T) {
	qp, _ := newRecQP(t, true)
	qx, rec := qp.QPEx(), recQPOf(qp)
	for _, c := range []struct {
		name  string
		build func()
		want  verbs.Errno
	}{
		{"setter before any builder", func() { qx.WRAbort(); qx.WRStart(); qx.WRSetSGE(1, 2, 3) }, verbs.ErrInvalidArgument},
		{"inline data on an RDMA READ", func() { qx.WRRDMARead(1, 2); qx.WRSetInlineData([]byte("x")) }, verbs.ErrInvalidArgument},
		{"inline data on an atomic", func() { qx.WRAtomicFetchAdd(1, 8, 1); qx.WRSetInlineDataList([][]byte{{1}}) }, verbs.ErrInvalidArgument},
		{"more inline data than max_inline_data", func() { qx.WRSend(); qx.WRSetInlineData(make([]byte, 129)) }, verbs.ErrInvalidArgument},
		{"more SGEs than max_send_sge", func() { qx.WRSend(); qx.WRSetSGEList(make([]verbs.SGE, 5)) }, verbs.ErrInvalidArgument},
		{"bind without a window", func() { qx.WRBindMW(nil, 1, &verbs.MWBindInfo{}) }, verbs.ErrInvalidArgument},
		{"the first error wins", func() { qx.WRSend(); qx.WRSetSGEList(make([]verbs.SGE, 5)); qx.WRSetUDAddr(nil, 0, 0) }, verbs.ErrInvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.posts = nil
			qx.WRStart()
			qx.WRSend() // a good request ahead of the mistake
			c.build()
			qx.WRSend()
			err := qx.WRComplete()
			if !errors.Is(err, c.want) {
				t.Fatalf("WRComplete: %v, want %s", err, c.want)
			}
			if len(rec.posts) != 0 {
				t.Fatalf("posted %+v", rec.posts)
			}
		})
	}
}

// Inline data is copied at the call, so the caller may reuse its buffer
// at once, into memory registered with the QP's PD, which grows as a
// batch needs and is released with the QP.
func TestQPExInlineDataIsCopiedAtTheCall(t *testing.T) {
	qp, pd := newRecQP(t, false)
	qx, rec := qp.QPEx(), recQPOf(qp)
	buf := make([]byte, 100)
	var want []string
	qx.WRStart()
	for i := range 10 { // 1000 bytes: the staging memory grows twice
		for j := range buf {
			buf[j] = byte('a' + (i+j)%26)
		}
		want = append(want, string(buf))
		qx.WRID = uint64(i)
		if i%2 == 0 {
			qx.WRSend()
			qx.WRSetInlineData(buf)
		} else {
			qx.WRRDMAWriteImm(1, 2, 3)
			qx.WRSetInlineDataList([][]byte{buf[:30], buf[30:], nil})
		}
	}
	qx.WRSend()
	qx.WRSetInlineData(nil) // no data at all
	if err := qx.WRComplete(); err != nil {
		t.Fatal(err)
	}
	got := rec.posts[0]
	for i, w := range want {
		if got[i].inline != w || got[i].wr.SendFlags&verbs.SendInline == 0 {
			t.Errorf("request %d carried %q (flags %#x), want %q inline", i, got[i].inline, got[i].wr.SendFlags, w)
		}
	}
	if last := got[len(got)-1]; len(last.wr.SGList) != 0 {
		t.Errorf("empty inline data posted as %+v", last.wr.SGList)
	}
	// An SGE set after inline data replaces it.
	qx.WRStart()
	qx.WRSend()
	qx.WRSetInlineData([]byte("x"))
	qx.WRSetSGE(1, 2, 3)
	if err := qx.WRComplete(); err != nil {
		t.Fatal(err)
	}
	if w := rec.posts[1][0].wr; w.SendFlags&verbs.SendInline != 0 || len(w.SGList) != 1 || w.SGList[0].LKey != 1 {
		t.Errorf("after WRSetSGE: %+v", w)
	}
	if err := pd.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("dealloc with the QP alive: %v", err)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatalf("the QP's staging memory outlived it: %v", err)
	}
	qx.WRStart()
	qx.WRSend()
	qx.WRSetInlineData([]byte("late"))
	if err := qx.WRComplete(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("WRComplete on a destroyed QP: %v, want ErrClosed", err)
	}
}

// Building and posting allocates nothing per work request once the
// builder's buffers have grown to the batch.
func TestQPExPostDoesNotAllocate(t *testing.T) {
	if racesync.Enabled {
		t.Skip("the race detector allocates")
	}
	qp, _ := newRecQP(t, true)
	qx := qp.QPEx()
	recQPOf(qp).discard = true
	data := []byte("sixteen bytes!!!")
	sges := []verbs.SGE{{Addr: 1, Length: 8, LKey: 1}, {Addr: 9, Length: 8, LKey: 1}}
	batch := func() {
		qx.WRStart()
		for i := range 4 {
			qx.WRID, qx.WRFlags = uint64(i), verbs.SendSignaled
			qx.WRSend()
			qx.WRSetSGE(1, 0x100, 64)
			qx.WRRDMAWrite(2, 0x200)
			qx.WRSetSGEList(sges)
			qx.WRSendImm(7)
			qx.WRSetInlineData(data)
		}
		if err := qx.WRComplete(); err != nil {
			t.Fatal(err)
		}
	}
	batch()
	if allocs := testing.AllocsPerRun(100, batch); allocs != 0 {
		t.Errorf("%v allocations per batch of 12 work requests", allocs)
	}
}

func BenchmarkQPExPost(b *testing.B) {
	qp, _ := newRecQP(b, true)
	qx := qp.QPEx()
	recQPOf(qp).discard = true
	b.ReportAllocs()
	for b.Loop() {
		qx.WRStart()
		qx.WRID, qx.WRFlags = 1, verbs.SendSignaled
		qx.WRSend()
		qx.WRSetSGE(1, 0x100, 64)
		if err := qx.WRComplete(); err != nil {
			b.Fatal(err)
		}
	}
}

// The recording device does XRC far enough for CreateQPEx's XRC paths.
func (c *recContext) OpenXRCD(*verbs.XRCDInitAttr) (verbs.XRCDDriver, error) { return recXRCD{c}, nil }

type recXRCD struct{ c *recContext }

func (recXRCD) CreateSRQ(*verbs.SRQInitAttrEx) (verbs.XRCSRQDriver, error) {
	return nil, verbs.ErrNotSupported
}
func (x recXRCD) CreateQP(*verbs.QPInitAttr) (verbs.QPDriver, error) { return &recQP{c: x.c}, nil }
func (recXRCD) OpenQP(uint32) (verbs.QPDriver, error)                { return nil, verbs.ErrNotSupported }
func (recXRCD) Close() error                                         { return nil }

func TestCreateQPExChecksItsAttributes(t *testing.T) {
	ctx, pd, cq := recPDAndCQ(t, recDevice{})
	xrcd, err := ctx.OpenXRCD(nil)
	if err != nil {
		t.Fatal(err)
	}
	base := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}
	recv := verbs.QPInitAttr{QPType: verbs.QPTXRCRecv}
	for _, c := range []struct {
		name string
		attr verbs.QPInitAttrEx
		want error // nil: created
	}{
		{"PD only", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrPD, PD: pd}, nil},
		{"no PD", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrSendOpsFlags, SendOpsFlags: verbs.QPExWithSend}, verbs.ErrInvalidArgument},
		{"PD bit without a PD", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrPD}, verbs.ErrInvalidArgument},
		{"unknown comp_mask bit", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrPD | 1<<12, PD: pd}, verbs.ErrNotSupported},
		{"TSO header", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrMaxTSOHeader, PD: pd}, verbs.ErrNotSupported},
		{"RX hash", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrRXHash, PD: pd}, verbs.ErrNotSupported},
		{"create flags", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrCreateFlags, PD: pd, CreateFlags: verbs.QPCreateScatterFCS}, verbs.ErrNotSupported},
		{"create flags bit with no flags", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrCreateFlags, PD: pd}, nil},
		{"flush", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrSendOpsFlags, PD: pd, SendOpsFlags: verbs.QPExWithFlush}, verbs.ErrNotSupported},
		{"XRC_RECV in its domain", verbs.QPInitAttrEx{QPInitAttr: recv, CompMask: verbs.QPInitAttrXRCD, XRCD: xrcd}, nil},
		{"XRC_RECV without a domain", verbs.QPInitAttrEx{QPInitAttr: recv, CompMask: verbs.QPInitAttrXRCD}, verbs.ErrInvalidArgument},
		{"XRC_RECV with send operations", verbs.QPInitAttrEx{QPInitAttr: recv, CompMask: verbs.QPInitAttrXRCD | verbs.QPInitAttrSendOpsFlags, XRCD: xrcd, SendOpsFlags: verbs.QPExWithSend}, verbs.ErrInvalidArgument},
		{"an RC QP from an XRC domain", verbs.QPInitAttrEx{QPInitAttr: base, CompMask: verbs.QPInitAttrXRCD, XRCD: xrcd}, verbs.ErrInvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := c.attr
			qp, err := ctx.CreateQPEx(&a)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("CreateQPEx: %v, want %v", err, c.want)
			}
			if qp == nil {
				return
			}
			if qp.QPEx() != nil {
				t.Error("a QP made without send_ops_flags has a QPEx")
			}
			if a.CompMask&verbs.QPInitAttrXRCD != 0 && qp.XRCD() != xrcd {
				t.Error("the XRC_RECV QP is not in its domain")
			}
			if err := qp.Destroy(); err != nil {
				t.Fatal(err)
			}
		})
	}
	if qp, err := ctx.CreateQPEx(nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("nil attributes: %v, %v, want EINVAL", qp, err)
	}
	if qp, err := pd.CreateQP(nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("ibv_create_qp with nil attributes: %v, %v, want EINVAL", qp, err)
	}
	if qp, err := xrcd.CreateQP(nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("an XRC_RECV QP with nil attributes: %v, %v, want EINVAL", qp, err)
	}
}

// An XRC_SEND request names the remote XRC SRQ it is for; without it
// WRComplete fails.
func TestQPExXRCSendNeedsTheRemoteSRQN(t *testing.T) {
	ctx, pd, cq := recPDAndCQ(t, recDevice{batch: true})
	qp, err := ctx.CreateQPEx(&verbs.QPInitAttrEx{QPInitAttr: verbs.QPInitAttr{SendCQ: cq, QPType: verbs.QPTXRCSend, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}},
		CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrSendOpsFlags, PD: pd, SendOpsFlags: verbs.QPExWithSend | verbs.QPExWithRDMARead})
	if err != nil {
		t.Fatal(err)
	}
	qx, rec := qp.QPEx(), recQPOf(qp)
	qx.WRStart()
	qx.WRSend()
	qx.WRSetXRCSRQN(0x77)
	qx.WRRDMARead(1, 2) // no SRQ number
	if err := qx.WRComplete(); !errors.Is(err, verbs.ErrInvalidArgument) || len(rec.posts) != 0 {
		t.Fatalf("a request without ibv_wr_set_xrc_srqn: %v, %d lists posted", err, len(rec.posts))
	}
	qx.WRStart()
	qx.WRSend()
	qx.WRSetXRCSRQN(0x77)
	qx.WRSetSGE(1, 2, 3)
	qx.WRSend()
	qx.WRSetXRCSRQN(0)
	if err := qx.WRComplete(); err != nil {
		t.Fatal(err)
	}
	if p := rec.posts[0]; len(p) != 2 || p[0].wr.RemoteSRQN != 0x77 || p[1].wr.RemoteSRQN != 0 {
		t.Fatalf("posted %+v", p)
	}
}
