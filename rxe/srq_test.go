package rxe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// srqDev is one device of an SRQ test: a context, a PD, one CQ for all its
// QPs and one registered buffer.
type srqDev struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	buf []byte
	mr  *verbs.MR
	qps []*end // ends sharing ctx, pd, cq, buf and mr
}

func srqOpenDev(t *testing.T, name string, l link.Link, bufSize int) *srqDev {
	t.Helper()
	dev, err := NewDevice(Config{Name: name, Links: []link.Link{l}, NetdevMTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	d := &srqDev{buf: make([]byte, bufSize)}
	if d.ctx, err = dev.Open(); err != nil {
		t.Fatal(err)
	}
	if d.pd, err = d.ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if d.cq, err = d.ctx.CreateCQ(8192, nil, 0); err != nil {
		t.Fatal(err)
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if d.mr, err = d.pd.RegMR(d.buf, access); err != nil {
		t.Fatal(err)
	}
	return d
}

// addQP makes a QP on the device, on srq if it is not nil.
func (d *srqDev) addQP(t *testing.T, typ verbs.QPType, srq *verbs.SRQ) *end {
	t.Helper()
	attr := &verbs.QPInitAttr{SendCQ: d.cq, RecvCQ: d.cq, QPType: typ, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}
	qp, err := d.pd.CreateQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	e := &end{t: t, ctx: d.ctx, pd: d.pd, cq: d.cq, qp: qp, buf: d.buf, mr: d.mr}
	d.qps = append(d.qps, e)
	return e
}

// close tears the device down, QPs first, checking every step.
func (d *srqDev) close(t *testing.T, srq *verbs.SRQ) {
	for _, e := range d.qps {
		if err := e.qp.Destroy(); err != nil {
			t.Error(err)
		}
	}
	steps := []func() error{d.mr.Dereg, d.cq.Destroy}
	if srq != nil {
		steps = append([]func() error{srq.Destroy}, steps...)
	}
	steps = append(steps, d.pd.Dealloc, d.ctx.Close)
	for _, f := range steps {
		if err := f(); err != nil {
			t.Error(err)
		}
	}
}

// srqRig is a sender device with n QPs, each connected to one of n QPs of
// a receiver device that all take their receive WQEs from one SRQ.
type srqRig struct {
	net *link.Network
	snd *srqDev
	rcv *srqDev
	srq *verbs.SRQ
	o   pairOpts
}

func newSRQRig(t *testing.T, seed uint64, f link.Faults, n int, attr verbs.SRQAttr, o pairOpts) *srqRig {
	t.Helper()
	o.defaults()
	r := &srqRig{net: link.NewNetwork(seed), o: o}
	la, err := r.net.Attach(netip.MustParseAddr("10.3.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := r.net.Attach(netip.MustParseAddr("10.3.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	r.snd = srqOpenDev(t, "srq_snd", la, o.bufSize)
	r.rcv = srqOpenDev(t, "srq_rcv", lb, o.bufSize)
	t.Cleanup(func() { r.rcv.close(t, r.srq); r.snd.close(t, nil) })
	init := verbs.SRQInitAttr{Attr: attr}
	if r.srq, err = r.rcv.pd.CreateSRQ(&init); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		s := r.snd.addQP(t, o.typ, nil)
		d := r.rcv.addQP(t, o.typ, r.srq)
		if o.typ == verbs.QPTUD {
			udToRTS(t, s.qp, testQKey)
			udToRTS(t, d.qp, testQKey)
			continue
		}
		connect(t, s, d, &o)
	}
	r.net.SetFaults(f)
	return r
}

// diagnose describes the QPs' states and the sender's completions, for a
// failure message.
func (r *srqRig) diagnose() string {
	s := ""
	for i := range r.snd.qps {
		s += fmt.Sprintf("\n  pair %d: sender %s, receiver %s", i, r.snd.qps[i].qp.State(), r.rcv.qps[i].qp.State())
	}
	a, _ := r.srq.Query()
	s += fmt.Sprintf("\n  SRQ %+v", a)
	wcs := make([]verbs.WC, 1024)
	n, _ := r.snd.cq.Poll(wcs)
	bad := 0
	for _, wc := range wcs[:n] {
		if wc.Status != verbs.WCSuccess {
			bad++
			if bad < 5 {
				s += fmt.Sprintf("\n  sender completion %+v", wc)
			}
		}
	}
	return s + fmt.Sprintf("\n  %d sender completions, %d failed", n, bad)
}

// post posts one receive WR to the SRQ: WRID id, into slot id of size slot.
func (r *srqRig) post(t *testing.T, id, slot int) {
	t.Helper()
	if err := r.srq.PostRecv([]verbs.RecvWR{{WRID: uint64(id), SGList: []verbs.SGE{r.rcv.mr.SGE(id*slot, slot)}}}); err != nil {
		t.Fatalf("posting SRQ WR %d: %v", id, err)
	}
}

// send posts a signaled SEND of n bytes at offset off of the sender's
// buffer on sender QP i.
func (r *srqRig) send(t *testing.T, i int, wrid uint64, off, n int) {
	t.Helper()
	wr := verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{r.snd.mr.SGE(off, n)}}
	if err := r.snd.qps[i].qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
}

// waitCQ polls cq until n completions arrived.
func srqWaitCQ(t *testing.T, cq *verbs.CQ, n int, d time.Duration) []verbs.WC {
	t.Helper()
	return (&end{t: t, cq: cq}).wait(n, d)
}

// srqNoEvent fails if an asynchronous event other than PORT_ACTIVE is
// queued on ctx.
func srqNoEvent(t *testing.T, ctx *verbs.Context, when string) {
	t.Helper()
	for {
		select {
		case ev := <-ctx.AsyncEvents():
			if ev.Type == verbs.EventPortActive {
				continue
			}
			t.Fatalf("%s: unexpected event %s (QP %v, SRQ %v)", when, ev.Type, ev.QP != nil, ev.SRQ != nil)
		default:
			return
		}
	}
}

// srqNextEvent waits for the next asynchronous event other than
// PORT_ACTIVE.
func srqNextEvent(t *testing.T, ctx *verbs.Context, d time.Duration) verbs.AsyncEvent {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		ev, err := ctx.GetAsyncEvent(c)
		if err != nil {
			t.Fatalf("no asynchronous event: %v", err)
		}
		if ev.Type != verbs.EventPortActive {
			return ev
		}
	}
}

// TestSRQCreateChecksAttributes pins down ibv_create_srq's argument checks
// and the sizes it reports.
func TestSRQCreateChecksAttributes(t *testing.T) {
	r := newSRQRig(t, 1, link.Faults{}, 0, verbs.SRQAttr{MaxWR: 1}, pairOpts{bufSize: 4096})
	tests := []struct {
		name string
		attr verbs.SRQAttr
		want error // nil: created, and queried back as wantAttr
		got  verbs.SRQAttr
	}{
		{"max_wr 0", verbs.SRQAttr{MaxWR: 0, MaxSGE: 1}, verbs.ErrInvalidArgument, verbs.SRQAttr{}},
		{"max_wr above the device's", verbs.SRQAttr{MaxWR: maxSRQWR + 1, MaxSGE: 1}, verbs.ErrInvalidArgument, verbs.SRQAttr{}},
		{"max_sge above the device's", verbs.SRQAttr{MaxWR: 4, MaxSGE: maxSGE + 1}, verbs.ErrInvalidArgument, verbs.SRQAttr{}},
		{"srq_limit above max_wr", verbs.SRQAttr{MaxWR: 4, MaxSGE: 1, SRQLimit: 5}, verbs.ErrInvalidArgument, verbs.SRQAttr{}},
		{"the device's largest", verbs.SRQAttr{MaxWR: maxSRQWR, MaxSGE: maxSGE}, nil, verbs.SRQAttr{MaxWR: maxSRQWR, MaxSGE: maxSGE}},
		{"max_sge 0 rounds up to 1", verbs.SRQAttr{MaxWR: 8}, nil, verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}},
		{"srq_limit equal to max_wr", verbs.SRQAttr{MaxWR: 8, MaxSGE: 2, SRQLimit: 8}, nil, verbs.SRQAttr{MaxWR: 8, MaxSGE: 2, SRQLimit: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			init := verbs.SRQInitAttr{Attr: tt.attr}
			srq, err := r.rcv.pd.CreateSRQ(&init)
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("CreateSRQ(%+v) = %v, want %v", tt.attr, err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateSRQ(%+v): %v", tt.attr, err)
			}
			defer func() {
				if err := srq.Destroy(); err != nil {
					t.Error(err)
				}
			}()
			if init.Attr != tt.got {
				t.Errorf("CreateSRQ returned attributes %+v, want %+v", init.Attr, tt.got)
			}
			q, err := srq.Query()
			if err != nil || q != tt.got {
				t.Errorf("Query = %+v, %v; want %+v", q, err, tt.got)
			}
			if srq.PD() != r.rcv.pd {
				t.Error("SRQ.PD is not the PD it was created on")
			}
		})
	}
}

// TestSRQModifyResizesAndArmsWithinBounds pins down ibv_modify_srq: max_wr
// may grow, or shrink down to the WRs posted; srq_limit may not exceed
// max_wr; unknown mask bits are refused; a refused call changes nothing.
func TestSRQModifyResizesAndArmsWithinBounds(t *testing.T) {
	tests := []struct {
		name   string
		limit  uint32 // armed at creation
		attr   verbs.SRQAttr
		mask   verbs.SRQAttrMask
		ok     bool
		after  verbs.SRQAttr // what Query reports afterwards
		postOK int           // WRs that fit afterwards (of those posted, 6)
	}{
		{"grow", 0, verbs.SRQAttr{MaxWR: 32}, verbs.SRQAttrMaxWR, true, verbs.SRQAttr{MaxWR: 32, MaxSGE: 2}, 26},
		{"shrink to the WRs posted", 0, verbs.SRQAttr{MaxWR: 6}, verbs.SRQAttrMaxWR, true, verbs.SRQAttr{MaxWR: 6, MaxSGE: 2}, 0},
		{"shrink below the WRs posted", 0, verbs.SRQAttr{MaxWR: 5}, verbs.SRQAttrMaxWR, false, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, 10},
		{"max_wr 0", 0, verbs.SRQAttr{MaxWR: 0}, verbs.SRQAttrMaxWR, false, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, 10},
		{"max_wr above the device's", 0, verbs.SRQAttr{MaxWR: maxSRQWR + 1}, verbs.SRQAttrMaxWR, false, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, 10},
		{"arm the limit", 0, verbs.SRQAttr{SRQLimit: 3}, verbs.SRQAttrLimit, true, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2, SRQLimit: 3}, 10},
		{"disarm the limit", 5, verbs.SRQAttr{SRQLimit: 0}, verbs.SRQAttrLimit, true, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, 10},
		{"limit above max_wr", 0, verbs.SRQAttr{SRQLimit: 17}, verbs.SRQAttrLimit, false, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, 10},
		{"limit above the new max_wr", 0, verbs.SRQAttr{MaxWR: 8, SRQLimit: 9}, verbs.SRQAttrMaxWR | verbs.SRQAttrLimit, false, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, 10},
		{"resize and arm at once", 0, verbs.SRQAttr{MaxWR: 40, SRQLimit: 30}, verbs.SRQAttrMaxWR | verbs.SRQAttrLimit, true, verbs.SRQAttr{MaxWR: 40, MaxSGE: 2, SRQLimit: 30}, 34},
		{"the limit alone ignores max_wr", 0, verbs.SRQAttr{MaxWR: 1, SRQLimit: 2}, verbs.SRQAttrLimit, true, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2, SRQLimit: 2}, 10},
		{"unknown mask bit", 0, verbs.SRQAttr{MaxWR: 32}, verbs.SRQAttrMaxWR | 1<<5, false, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, 10},
		// Linux rxe (rxe_srq_chk_attr) refuses a max_wr below an armed
		// srq_limit: the limit would be above the queue.
		{"shrink below the armed limit", 12, verbs.SRQAttr{MaxWR: 8}, verbs.SRQAttrMaxWR, false, verbs.SRQAttr{MaxWR: 16, MaxSGE: 2, SRQLimit: 12}, 10},
	}
	r := newSRQRig(t, 1, link.Faults{}, 0, verbs.SRQAttr{MaxWR: 1}, pairOpts{bufSize: 4096})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			init := verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 2, SRQLimit: tt.limit}}
			srq, err := r.rcv.pd.CreateSRQ(&init)
			if err != nil {
				t.Fatal(err)
			}
			defer srq.Destroy()
			for i := 0; i < 6; i++ {
				if err := srq.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{r.rcv.mr.SGE(0, 8)}}}); err != nil {
					t.Fatal(err)
				}
			}
			attr := tt.attr
			err = srq.Modify(&attr, tt.mask)
			if tt.ok && err != nil {
				t.Fatalf("Modify(%+v, %#x): %v", tt.attr, tt.mask, err)
			}
			if !tt.ok && !errors.Is(err, verbs.ErrInvalidArgument) {
				t.Fatalf("Modify(%+v, %#x) = %v, want EINVAL", tt.attr, tt.mask, err)
			}
			if q, err := srq.Query(); err != nil || q != tt.after {
				t.Errorf("Query after Modify = %+v, %v; want %+v", q, err, tt.after)
			}
			// Exactly postOK more WRs fit.
			wrs := make([]verbs.RecvWR, tt.postOK+1)
			for i := range wrs {
				wrs[i] = verbs.RecvWR{WRID: uint64(100 + i), SGList: []verbs.SGE{r.rcv.mr.SGE(0, 8)}}
			}
			err = srq.PostRecv(wrs)
			var wre *verbs.WRError
			if !errors.As(err, &wre) || wre.Index != tt.postOK || wre.WRID != uint64(100+tt.postOK) || !errors.Is(err, verbs.ErrNoMemory) {
				t.Errorf("posting %d WRs: %v, want ENOMEM at index %d", len(wrs), err, tt.postOK)
			}
		})
	}
}

// TestSRQPostRecvRejectsBadWorkRequests checks ibv_post_srq_recv's error
// convention: the WRs before the bad one are posted, the rest are not.
func TestSRQPostRecvRejectsBadWorkRequests(t *testing.T) {
	r := newSRQRig(t, 1, link.Faults{}, 1, verbs.SRQAttr{MaxWR: 4, MaxSGE: 2}, pairOpts{bufSize: 1 << 16})
	sge := r.rcv.mr.SGE(0, 8)
	tests := []struct {
		name  string
		wrs   []verbs.RecvWR
		index int
		want  verbs.Errno
	}{
		{"too many SGEs", []verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{sge}}, {WRID: 2, SGList: []verbs.SGE{sge, sge, sge}}}, 1, verbs.ErrInvalidArgument},
		{"more WRs than max_wr", []verbs.RecvWR{{WRID: 1}, {WRID: 2}, {WRID: 3}, {WRID: 4}, {WRID: 5}}, 4, verbs.ErrNoMemory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Empty the SRQ: destroy it with its WRs and make a new one.
			for _, e := range r.rcv.qps {
				e.qp.Destroy()
			}
			r.rcv.qps = nil
			if err := r.srq.Destroy(); err != nil {
				t.Fatal(err)
			}
			var err error
			if r.srq, err = r.rcv.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 2}}); err != nil {
				t.Fatal(err)
			}
			err = r.srq.PostRecv(tt.wrs)
			var wre *verbs.WRError
			if !errors.As(err, &wre) || wre.Index != tt.index || wre.WRID != tt.wrs[tt.index].WRID || !errors.Is(err, tt.want) {
				t.Fatalf("PostRecv: %v, want a WRError at index %d wrapping %v", err, tt.index, tt.want)
			}
			// The SRQ holds exactly the WRs before the bad one: room
			// for max_wr minus those.
			more := make([]verbs.RecvWR, 4-tt.index+1)
			err = r.srq.PostRecv(more)
			if !errors.As(err, &wre) || wre.Index != 4-tt.index || !errors.Is(err, verbs.ErrNoMemory) {
				t.Fatalf("after the failed post, %d more WRs: %v, want ENOMEM at index %d", len(more), err, 4-tt.index)
			}
		})
	}
}

// TestSRQLifetimeRules covers who may use an SRQ when: a QP on an SRQ
// takes no receive WRs of its own; the SRQ cannot be destroyed while QPs
// use it, nor its PD deallocated; once destroyed it refuses every call.
func TestSRQLifetimeRules(t *testing.T) {
	r := newSRQRig(t, 1, link.Faults{}, 1, verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}, pairOpts{bufSize: 1 << 16})
	qp := r.rcv.qps[0].qp
	t.Run("a QP on an SRQ refuses ibv_post_recv", func(t *testing.T) {
		err := qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{r.rcv.mr.SGE(0, 8)}}})
		var wre *verbs.WRError
		if !errors.As(err, &wre) || wre.Index != 0 || !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Fatalf("PostRecv on a QP with an SRQ: %v, want EINVAL at index 0", err)
		}
		if qp.SRQ() != r.srq {
			t.Fatal("QP.SRQ does not return the SRQ it was created with")
		}
		a, _, err := qp.Query()
		if err != nil || a.Cap.MaxRecvWR != 0 || a.Cap.MaxRecvSGE != 0 {
			t.Fatalf("Query: cap %+v %v, want no receive queue", a.Cap, err)
		}
	})
	t.Run("ibv_query_qp reports the SRQ", func(t *testing.T) {
		_, init, err := qp.Query()
		if err != nil {
			t.Fatal(err)
		}
		if init.SRQ != r.srq {
			t.Fatalf("ibv_query_qp: init_attr.srq = %p, want the QP's SRQ %p", init.SRQ, r.srq)
		}
	})
	t.Run("destroy while a QP uses it is EBUSY", func(t *testing.T) {
		if err := r.srq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("Destroy with a QP attached: %v, want EBUSY", err)
		}
		// Still usable.
		if err := r.srq.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{r.rcv.mr.SGE(0, 8)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.srq.Query(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the PD of an SRQ cannot be deallocated", func(t *testing.T) {
		pd, err := r.rcv.ctx.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		srq, err := pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := pd.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("Dealloc of a PD with an SRQ: %v, want EBUSY", err)
		}
		if err := srq.Destroy(); err != nil {
			t.Fatal(err)
		}
		if err := pd.Dealloc(); err != nil {
			t.Fatalf("Dealloc once the SRQ is gone: %v", err)
		}
	})
	t.Run("once its QPs are gone it can be destroyed, and refuses everything after", func(t *testing.T) {
		for _, e := range r.rcv.qps {
			if err := e.qp.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.srq.Destroy(); err != nil {
			t.Fatalf("Destroy with no QP attached: %v", err)
		}
		if err := r.srq.Destroy(); err != nil {
			t.Fatalf("second Destroy: %v, want nil as for other objects", err)
		}
		if err := r.srq.PostRecv([]verbs.RecvWR{{WRID: 1}}); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("PostRecv after Destroy: %v, want EBADF", err)
		}
		if _, err := r.srq.Query(); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("Query after Destroy: %v, want EBADF", err)
		}
		if err := r.srq.Modify(&verbs.SRQAttr{SRQLimit: 1}, verbs.SRQAttrLimit); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("Modify after Destroy: %v, want EBADF", err)
		}
		_, err := r.rcv.pd.CreateQP(&verbs.QPInitAttr{SendCQ: r.rcv.cq, RecvCQ: r.rcv.cq, QPType: verbs.QPTRC, SRQ: r.srq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
		if !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("CreateQP on a destroyed SRQ: %v, want EBADF", err)
		}
		r.srq = nil // already destroyed: the cleanup must not
	})
	t.Run("an SRQ of another device is refused", func(t *testing.T) {
		other, err := r.snd.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Destroy()
		_, err = r.rcv.pd.CreateQP(&verbs.QPInitAttr{SendCQ: r.rcv.cq, RecvCQ: r.rcv.cq, QPType: verbs.QPTRC, SRQ: other,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
		if !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Fatalf("CreateQP with another context's SRQ: %v, want EINVAL", err)
		}
	})
}

// TestSRQConsumesWRsInPostOrderAcrossQPs sends one message at a time over
// three QPs in turn: each takes the oldest WR of the SRQ, whichever QP it
// arrives on, and its completion names the QP and the sender.
func TestSRQConsumesWRsInPostOrderAcrossQPs(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.QPTRC, verbs.QPTUC, verbs.QPTUD} {
		t.Run(typ.String(), func(t *testing.T) {
			const slot, count = 4096, 12
			r := newSRQRig(t, 2, link.Faults{}, 3, verbs.SRQAttr{MaxWR: 64, MaxSGE: 1}, pairOpts{typ: typ, bufSize: 1 << 20})
			for i := 0; i < count+2; i++ {
				r.post(t, i, slot)
			}
			var ah *verbs.AH
			if typ == verbs.QPTUD {
				g, _ := r.rcv.ctx.QueryGID(1, 0)
				var err error
				if ah, err = r.snd.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: g, HopLimit: 64}}); err != nil {
					t.Fatal(err)
				}
				defer ah.Destroy()
			}
			hdr := 0
			if typ == verbs.QPTUD {
				hdr = verbs.GRHLen
			}
			for k := 0; k < count; k++ {
				i := (k * 2) % 3 // QPs 0, 2, 1, 0, ...
				size := 100 + 300*k
				if typ == verbs.QPTUD {
					size = 100 + 70*k
				}
				msg := r.snd.buf[k*slot : k*slot+size]
				stamp(msg, k)
				wr := verbs.SendWR{WRID: uint64(k), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{r.snd.mr.SGE(k*slot, size)},
					AH: ah, RemoteQPN: r.rcv.qps[i].qp.Num(), RemoteQKey: testQKey}
				if err := r.snd.qps[i].qp.PostSend([]verbs.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
				if wc := srqWaitCQ(t, r.snd.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess {
					t.Fatalf("message %d: send completion %+v", k, wc)
				}
				wc := srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)[0]
				if wc.Status != verbs.WCSuccess || wc.WRID != uint64(k) || wc.QPNum != r.rcv.qps[i].qp.Num() ||
					wc.SrcQP != r.snd.qps[i].qp.Num() || int(wc.ByteLen) != hdr+size || wc.Opcode != verbs.WCRecv {
					t.Fatalf("message %d on QP %d: receive completion %+v; want WR %d on QP %#x from %#x, %d bytes",
						k, i, wc, k, r.rcv.qps[i].qp.Num(), r.snd.qps[i].qp.Num(), hdr+size)
				}
				if got := r.rcv.buf[k*slot+hdr : k*slot+hdr+size]; string(got) != string(msg) {
					t.Fatalf("message %d: data differs", k)
				}
			}
			// The two WRs left are still there: nothing else consumed any.
			time.Sleep(5 * time.Millisecond)
			if n := r.rcv.cq.Len(); n != 0 {
				t.Fatalf("%d extra receive completions", n)
			}
		})
	}
}

// srqMsg describes message k of sender s in the lossy SRQ test.
func srqMsg(s, k int) (op verbs.WROpcode, size int) {
	ops := []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWriteWithImm, verbs.WRSend}
	sizes := []int{4, 1000, 1023, 1024, 1025, 2048, 3000, 4000, 7, 2049}
	return ops[(s+k)%len(ops)], sizes[(s*3+k)%len(sizes)]
}

// srqPayload fills b with message k of sender s: a 4-byte header naming
// it, then a pattern of both.
func srqPayload(b []byte, s, k int) {
	binary.BigEndian.PutUint16(b[0:], uint16(s))
	binary.BigEndian.PutUint16(b[2:], uint16(k))
	for i := 4; i < len(b); i++ {
		b[i] = byte(i*7 + s*31 + k*13)
	}
}

// TestSRQSharedByRCSendersDeliversEachMessageOnceInPostOrder has several
// RC senders, on a lossy, reordering, duplicating network, send SENDs,
// SEND_WITH_IMMs and WRITE_WITH_IMMs of sizes around the MTU into QPs on
// one small SRQ that the receiver refills as completions come (so RNR
// NAKs happen all the time). Every message must complete once, byte for
// byte, in order per QP, and the SRQ's WRs must be consumed in the order
// posted: exactly the first ones, and in increasing order on each QP.
func TestSRQSharedByRCSendersDeliversEachMessageOnceInPostOrder(t *testing.T) {
	const (
		nqp   = 4
		perQP = 40
		total = nqp * perQP
		depth = 12 // WRs in the SRQ at a time
		extra = 3  // WRs posted beyond what the messages need
		slot  = 4096
	)
	cases := []struct {
		name   string
		faults link.Faults
	}{
		{"clean", link.Faults{}},
		{"loss 5% reorder 5% duplicate 5%", link.Faults{Drop: 0.05, Reorder: 0.05, Duplicate: 0.05}},
		{"loss 10% duplicate 3%", link.Faults{Drop: 0.10, Duplicate: 0.03}},
		{"loss 3% reorder 3% duplicate 3% corrupt 1%", link.Faults{Drop: 0.03, Reorder: 0.03, Duplicate: 0.03, Corrupt: 0.01}},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const writeBase = (total + extra) * slot
			r := newSRQRig(t, uint64(40+ci), c.faults, nqp, verbs.SRQAttr{MaxWR: depth, MaxSGE: 1},
				pairOpts{bufSize: writeBase + total*slot, mtu: verbs.MTU1024, timeout: 13, minRNR: 1, rnrRetry: 7})
			// The messages, posted at once on every sender QP.
			for s := 0; s < nqp; s++ {
				var wrs []verbs.SendWR
				for k := 0; k < perQP; k++ {
					op, size := srqMsg(s, k)
					off := (s*perQP + k) * slot
					srqPayload(r.snd.buf[off:off+size], s, k)
					wrs = append(wrs, verbs.SendWR{WRID: uint64(s<<16 | k), Opcode: op, SendFlags: verbs.SendSignaled,
						SGList: []verbs.SGE{r.snd.mr.SGE(off, size)}, ImmData: uint32(s<<16 | k),
						RemoteAddr: r.rcv.mr.Addr() + uint64(writeBase+off), RKey: r.rcv.mr.RKey()})
				}
				if err := r.snd.qps[s].qp.PostSend(wrs); err != nil {
					t.Fatal(err)
				}
			}
			qpIndex := map[uint32]int{}
			for s, e := range r.rcv.qps {
				qpIndex[e.qp.Num()] = s
			}
			posted := 0
			for ; posted < depth; posted++ {
				r.post(t, posted, slot)
			}
			seen := make(map[int]bool)
			nextK := make([]int, nqp)      // per sender: the message expected next
			lastWR := make([]int, nqp)     // per receiving QP: the last WRID it completed
			consumed := make(map[int]bool) // WRIDs completed
			for i := range lastWR {
				lastWR[i] = -1
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			wcs := make([]verbs.WC, 64)
			for got := 0; got < total; {
				n, err := r.rcv.cq.Poll(wcs)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					if err := r.rcv.cq.Wait(ctx); err != nil {
						t.Fatalf("%d of %d messages received: %v (network %+v)%s", got, total, err, r.net.Stats(), r.diagnose())
					}
					continue
				}
				for _, wc := range wcs[:n] {
					got++
					if wc.Status != verbs.WCSuccess {
						t.Fatalf("receive completion %+v", wc)
					}
					s, ok := qpIndex[wc.QPNum]
					if !ok || wc.SrcQP != r.snd.qps[s].qp.Num() {
						t.Fatalf("completion %+v names no QP pair of the test", wc)
					}
					id := int(wc.WRID)
					if consumed[id] {
						t.Fatalf("SRQ WR %d completed twice", id)
					}
					consumed[id] = true
					if id <= lastWR[s] {
						t.Fatalf("QP %d completed SRQ WR %d after WR %d: WRs not taken in post order", s, id, lastWR[s])
					}
					lastWR[s] = id
					// Which message is it?
					k := nextK[s]
					nextK[s]++
					op, size := srqMsg(s, k)
					if int(wc.ByteLen) != size {
						t.Fatalf("QP %d message %d (%s): byte_len %d, want %d", s, k, op, wc.ByteLen, size)
					}
					var data []byte
					switch op {
					case verbs.WRRDMAWriteWithImm:
						if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.WCFlags&verbs.WCWithImm == 0 || wc.ImmData != uint32(s<<16|k) {
							t.Fatalf("QP %d message %d: %+v, want RECV_RDMA_WITH_IMM with immediate %#x", s, k, wc, s<<16|k)
						}
						off := writeBase + (s*perQP+k)*slot
						data = r.rcv.buf[off : off+size]
					case verbs.WRSendWithImm:
						if wc.Opcode != verbs.WCRecv || wc.WCFlags&verbs.WCWithImm == 0 || wc.ImmData != uint32(s<<16|k) {
							t.Fatalf("QP %d message %d: %+v, want RECV with immediate %#x", s, k, wc, s<<16|k)
						}
						data = r.rcv.buf[id*slot : id*slot+size]
					default:
						if wc.Opcode != verbs.WCRecv || wc.WCFlags&verbs.WCWithImm != 0 {
							t.Fatalf("QP %d message %d: %+v, want RECV", s, k, wc)
						}
						data = r.rcv.buf[id*slot : id*slot+size]
					}
					want := make([]byte, size)
					srqPayload(want, s, k)
					if string(data) != string(want) {
						t.Fatalf("QP %d message %d (%s, %d bytes, WR %d): data differs", s, k, op, size, id)
					}
					if seen[s<<16|k] {
						t.Fatalf("QP %d message %d delivered twice", s, k)
					}
					seen[s<<16|k] = true
					if posted < total+extra {
						r.post(t, posted, slot)
						posted++
					}
				}
			}
			for id := 0; id < total; id++ {
				if !consumed[id] {
					t.Fatalf("SRQ WR %d was skipped: the first %d WRs posted must be the ones consumed", id, total)
				}
			}
			for _, wc := range srqWaitCQ(t, r.snd.cq, total, 20*time.Second) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("send completion %+v", wc)
				}
			}
			time.Sleep(20 * time.Millisecond) // late duplicates arrive
			if n := r.rcv.cq.Len() + r.snd.cq.Len(); n != 0 {
				t.Fatalf("%d extra completions", n)
			}
			t.Logf("network: %+v", r.net.Stats())
		})
	}
}

// TestSRQSharedByUCSendersLosesNoWR has UC senders send multi-packet
// SENDs and WRITE_WITH_IMMs into QPs on one SRQ over a lossy, reordering
// network. UC drops a message that lost a packet, and its WR must go back
// to serve the next message: every completion holds one whole message,
// each at most once and in order per QP, and once the network is clean
// again, filler messages consume every WR posted, each exactly once.
func TestSRQSharedByUCSendersLosesNoWR(t *testing.T) {
	const (
		nqp   = 3
		perQP = 40
		slot  = 4096
		wrs   = nqp*perQP + 6
		size  = 2500 // three packets
	)
	for ci, c := range []struct {
		name   string
		faults link.Faults
	}{
		{"loss 5%", link.Faults{Drop: 0.05}},
		{"loss 5% reorder 5% duplicate 3%", link.Faults{Drop: 0.05, Reorder: 0.05, Duplicate: 0.03}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const writeBase = wrs * slot
			r := newSRQRig(t, uint64(50+ci), c.faults, nqp, verbs.SRQAttr{MaxWR: wrs, MaxSGE: 1},
				pairOpts{typ: verbs.QPTUC, bufSize: writeBase + nqp*perQP*slot, mtu: verbs.MTU1024})
			for i := 0; i < wrs; i++ {
				r.post(t, i, slot)
			}
			for s := 0; s < nqp; s++ {
				var list []verbs.SendWR
				for k := 0; k < perQP; k++ {
					off := (s*perQP + k) * slot
					srqPayload(r.snd.buf[off:off+size], s, k)
					op := verbs.WRSend
					if k%2 == 1 {
						op = verbs.WRRDMAWriteWithImm
					}
					list = append(list, verbs.SendWR{WRID: uint64(s<<16 | k), Opcode: op, SendFlags: verbs.SendSignaled,
						SGList: []verbs.SGE{r.snd.mr.SGE(off, size)}, ImmData: uint32(s<<16 | k),
						RemoteAddr: r.rcv.mr.Addr() + uint64(writeBase+off), RKey: r.rcv.mr.RKey()})
				}
				if err := r.snd.qps[s].qp.PostSend(list); err != nil {
					t.Fatal(err)
				}
			}
			for _, wc := range srqWaitCQ(t, r.snd.cq, nqp*perQP, 10*time.Second) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("UC send completion %+v", wc)
				}
			}
			time.Sleep(50 * time.Millisecond) // held packets arrive
			qpIndex := map[uint32]int{}
			for s, e := range r.rcv.qps {
				qpIndex[e.qp.Num()] = s
			}
			consumed := map[uint64]bool{}
			lastK := []int{-1, -1, -1}
			delivered := 0
			wcs := make([]verbs.WC, 256)
			n, _ := r.rcv.cq.Poll(wcs)
			for _, wc := range wcs[:n] {
				s, ok := qpIndex[wc.QPNum]
				if wc.Status != verbs.WCSuccess || !ok || int(wc.ByteLen) != size {
					t.Fatalf("receive completion %+v", wc)
				}
				if consumed[wc.WRID] {
					t.Fatalf("SRQ WR %d completed twice", wc.WRID)
				}
				consumed[wc.WRID] = true
				var data []byte
				var k int
				if wc.WCFlags&verbs.WCWithImm != 0 {
					if wc.Opcode != verbs.WCRecvRDMAWithImm || int(wc.ImmData>>16) != s {
						t.Fatalf("receive completion %+v", wc)
					}
					k = int(wc.ImmData & 0xffff)
					off := writeBase + (s*perQP+k)*slot
					data = r.rcv.buf[off : off+size]
				} else {
					data = r.rcv.buf[int(wc.WRID)*slot : int(wc.WRID)*slot+size]
					k = int(binary.BigEndian.Uint16(data[2:]))
				}
				want := make([]byte, size)
				srqPayload(want, s, k)
				if k >= perQP || string(data) != string(want) {
					t.Fatalf("QP %d, WR %d: not message %d of that sender, byte for byte", s, wc.WRID, k)
				}
				if k <= lastK[s] {
					t.Fatalf("QP %d: message %d after message %d", s, k, lastK[s])
				}
				lastK[s] = k
				delivered++
			}
			if c.faults.Drop > 0 && delivered == nqp*perQP {
				t.Fatalf("all %d messages arrived through a lossy network: the test does not test", delivered)
			}
			// Clean network: single-packet fillers take every WR left.
			r.net.SetFaults(link.Faults{})
			left := wrs - delivered
			for i := 0; i < left; i++ {
				r.send(t, i%nqp, uint64(1000+i), 0, 16)
				srqWaitCQ(t, r.snd.cq, 1, 5*time.Second)
				wc := srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)[0]
				if wc.Status != verbs.WCSuccess || wc.ByteLen != 16 || consumed[wc.WRID] || wc.WRID >= wrs {
					t.Fatalf("filler %d of %d: %+v (a WR lost or taken twice)", i, left, wc)
				}
				consumed[wc.WRID] = true
			}
			if len(consumed) != wrs {
				t.Fatalf("%d WRs consumed of %d", len(consumed), wrs)
			}
			time.Sleep(5 * time.Millisecond)
			if n := r.rcv.cq.Len(); n != 0 {
				t.Fatalf("%d completions beyond the WRs posted", n)
			}
			t.Logf("%d of %d messages delivered; network %+v", delivered, nqp*perQP, r.net.Stats())
		})
	}
}

// TestSRQEmptyMakesRCSendersWaitOrFail: with no WR in the SRQ an RC SEND
// is RNR NAKed; with rnr_retry 7 it waits until a WR is posted, however
// long that takes (an RNR NAK is an answer: the transport timer and
// retry_cnt bound an unresponsive peer, not a busy one); with a finite
// rnr_retry it fails with RNR_RETRY_EXC_ERR after that many retries and
// consumes no WR.
func TestSRQEmptyMakesRCSendersWaitOrFail(t *testing.T) {
	tests := []struct {
		name     string
		rnrRetry uint8
		timeout  uint8 // QP timeout code
		retry    uint8 // retry_cnt
		wait     time.Duration
		want     verbs.WCStatus
	}{
		{"rnr_retry 7 waits for a WR", 7, 12, 7, 30 * time.Millisecond, verbs.WCSuccess},
		// 250 ms is 14 transport timeouts of 16.8 ms with retry_cnt 1.
		// (1 ms timeouts failed on a loaded machine: an RNR NAK that
		// came back late counted as a lost packet, twice.)
		{"rnr_retry 7 waits longer than the transport timeouts", 7, 12, 1, 250 * time.Millisecond, verbs.WCSuccess},
		{"rnr_retry 1 gives up", 1, 12, 7, 0, verbs.WCRNRRetryExcErr},
		{"rnr_retry 3 gives up", 3, 12, 7, 0, verbs.WCRNRRetryExcErr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rnrNAKs srqRNRCounter
			r := newSRQRig(t, 3, link.Faults{}, 2, verbs.SRQAttr{MaxWR: 8, MaxSGE: 1},
				pairOpts{bufSize: 1 << 16, rnrRetry: tt.rnrRetry, minRNR: 1, timeout: tt.timeout, retry: tt.retry})
			r.net.SetFaults(link.Faults{Filter: rnrNAKs.countRNRNAKs})
			fill(r.snd.buf[:64], 3)
			r.send(t, 0, 1, 0, 64)
			if tt.want == verbs.WCSuccess {
				time.Sleep(tt.wait)
				if n := r.snd.cq.Len(); n != 0 {
					wcs := srqWaitCQ(t, r.snd.cq, n, time.Second)
					msg := fmt.Sprintf("the SEND completed while the SRQ was empty: %s (after %d RNR NAKs)", describe(wcs), rnrNAKs.load())
					t.Fatal(msg)
				}
				if rnrNAKs.load() == 0 {
					t.Fatal("no RNR NAK while the SRQ was empty")
				}
				r.post(t, 0, 1024)
				if wc := srqWaitCQ(t, r.snd.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 1 {
					t.Fatalf("send completion %+v", wc)
				}
				if wc := srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 0 || wc.ByteLen != 64 {
					t.Fatalf("receive completion %+v", wc)
				}
				if string(r.rcv.buf[:64]) != string(r.snd.buf[:64]) {
					t.Fatal("data differs")
				}
				return
			}
			wc := srqWaitCQ(t, r.snd.cq, 1, 5*time.Second)[0]
			if wc.Status != tt.want || wc.WRID != 1 {
				t.Fatalf("send completion %+v, want %s", wc, tt.want)
			}
			if n := rnrNAKs.load(); n != int64(tt.rnrRetry)+1 {
				t.Errorf("%d RNR NAKs for rnr_retry %d, want %d", n, tt.rnrRetry, tt.rnrRetry+1)
			}
			waitState(t, r.snd.qps[0].qp, verbs.QPSErr)
			// The failed SEND took no WR: the other QP gets the first.
			r.post(t, 0, 1024)
			r.send(t, 1, 2, 0, 32)
			if wc := srqWaitCQ(t, r.snd.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 2 {
				t.Fatalf("second sender: %+v", wc)
			}
			if wc := srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 0 || wc.QPNum != r.rcv.qps[1].qp.Num() {
				t.Fatalf("receive completion %+v, want WR 0 on the second QP", wc)
			}
		})
	}
}

// TestSRQLimitEventFiresOnceWhenFewerThanLimitRemain: an armed SRQ raises
// IBV_EVENT_SRQ_LIMIT_REACHED exactly when a WR taken leaves fewer than
// srq_limit, once, and disarms (Query shows 0); re-arming makes it fire
// again at the next WR taken; never armed, it never fires.
func TestSRQLimitEventFiresOnceWhenFewerThanLimitRemain(t *testing.T) {
	tests := []struct {
		name      string
		initLimit uint32 // armed at creation
		modLimit  uint32 // armed with ibv_modify_srq
		fireAt    int    // the message (from 1) whose WR fires it; 0: never
	}{
		{"armed at creation", 4, 0, 7},
		{"armed by ibv_modify_srq", 0, 4, 7},
		{"limit 1", 0, 1, 10},
		{"limit equal to the WRs posted", 0, 10, 1},
		{"never armed", 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSRQRig(t, 4, link.Faults{}, 2, verbs.SRQAttr{MaxWR: 16, MaxSGE: 1, SRQLimit: tt.initLimit}, pairOpts{bufSize: 1 << 16})
			srqNoEvent(t, r.rcv.ctx, "at start")
			for i := 0; i < 10; i++ {
				r.post(t, i, 1024)
			}
			limit := tt.initLimit
			if tt.modLimit != 0 {
				if err := r.srq.Modify(&verbs.SRQAttr{SRQLimit: tt.modLimit}, verbs.SRQAttrLimit); err != nil {
					t.Fatal(err)
				}
				limit = tt.modLimit
			}
			if a, err := r.srq.Query(); err != nil || a.SRQLimit != limit {
				t.Fatalf("Query: %+v %v, want srq_limit %d", a, err, limit)
			}
			for m := 1; m <= 10; m++ {
				r.send(t, m%2, uint64(m), 0, 16)
				srqWaitCQ(t, r.snd.cq, 1, 5*time.Second)
				if wc := srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != uint64(m-1) {
					t.Fatalf("message %d: receive %+v", m, wc)
				}
				if m != tt.fireAt {
					srqNoEvent(t, r.rcv.ctx, fmt.Sprintf("after message %d (%d WRs left, limit %d)", m, 10-m, limit))
					continue
				}
				// The event is raised as the WR is taken, before its
				// completion is queued.
				select {
				case ev := <-r.rcv.ctx.AsyncEvents():
					if ev.Type != verbs.EventSRQLimitReached || ev.SRQ != r.srq || ev.QP != nil {
						t.Fatalf("after message %d: event %s (SRQ %p, QP %p), want SRQ_LIMIT_REACHED on %p", m, ev.Type, ev.SRQ, ev.QP, r.srq)
					}
				default:
					t.Fatalf("no SRQ_LIMIT_REACHED after message %d: %d WRs left, limit %d", m, 10-m, limit)
				}
				if a, err := r.srq.Query(); err != nil || a.SRQLimit != 0 {
					t.Fatalf("after the event: %+v %v, want the limit disarmed (0)", a, err)
				}
				limit = 0
			}
			if tt.fireAt == 0 {
				return
			}
			// Re-armed, it fires at the next WR taken.
			for i := 10; i < 13; i++ {
				r.post(t, i, 1024)
			}
			if err := r.srq.Modify(&verbs.SRQAttr{SRQLimit: 2}, verbs.SRQAttrLimit); err != nil {
				t.Fatal(err)
			}
			srqNoEvent(t, r.rcv.ctx, "right after re-arming (3 WRs left, limit 2)")
			r.send(t, 0, 20, 0, 16)
			srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)
			srqNoEvent(t, r.rcv.ctx, "2 WRs left, limit 2")
			r.send(t, 1, 21, 0, 16)
			srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)
			if ev := srqNextEvent(t, r.rcv.ctx, time.Second); ev.Type != verbs.EventSRQLimitReached || ev.SRQ != r.srq {
				t.Fatalf("after re-arming: event %s, want SRQ_LIMIT_REACHED", ev.Type)
			}
			r.send(t, 0, 22, 0, 16)
			srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)
			srqNoEvent(t, r.rcv.ctx, "after the re-armed event")
		})
	}
}

// TestSRQLastWQEReachedWhenQPLeavesTheSRQ: a QP on an SRQ that goes to
// ERR (asked, or after a protection error) raises
// IBV_EVENT_QP_LAST_WQE_REACHED for that QP, once; the SRQ's WRs are not
// flushed with it, and the SRQ's other QPs go on taking them in order.
func TestSRQLastWQEReachedWhenQPLeavesTheSRQ(t *testing.T) {
	tests := []struct {
		name  string
		fail  func(t *testing.T, r *srqRig) // puts receiving QP 0 in ERR
		first verbs.EventType               // the event before LAST_WQE_REACHED, if any
	}{
		{"modify to ERR", func(t *testing.T, r *srqRig) {
			if err := r.rcv.qps[0].qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"remote access error", func(t *testing.T, r *srqRig) {
			wr := verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{r.snd.mr.SGE(0, 8)},
				RemoteAddr: r.rcv.mr.Addr(), RKey: r.rcv.mr.RKey() ^ 0x100}
			if err := r.snd.qps[0].qp.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := srqWaitCQ(t, r.snd.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCRemAccessErr {
				t.Fatalf("bad WRITE: %+v, want REM_ACCESS_ERR", wc)
			}
		}, verbs.EventQPAccessErr},
		{"a SEND larger than the WR", func(t *testing.T, r *srqRig) {
			r.send(t, 0, 9, 0, 2000) // the WR holds 1024
			if wc := srqWaitCQ(t, r.snd.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCRemInvReqErr {
				t.Fatalf("long SEND: %+v, want REM_INV_REQ_ERR", wc)
			}
			if wc := srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCLocLenErr || wc.WRID != 100 {
				t.Fatalf("receive of the long SEND: %+v, want LOC_LEN_ERR on WR 100", wc)
			}
		}, verbs.EventQPReqErr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSRQRig(t, 5, link.Faults{}, 2, verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}, pairOpts{bufSize: 1 << 16})
			srqNoEvent(t, r.rcv.ctx, "at start")
			if tt.first == verbs.EventQPReqErr {
				// The first WR, which the long SEND takes: 1024 bytes.
				if err := r.srq.PostRecv([]verbs.RecvWR{{WRID: 100, SGList: []verbs.SGE{r.rcv.mr.SGE(8192, 1024)}}}); err != nil {
					t.Fatal(err)
				}
			}
			// WRs 0..3 wait in the SRQ while QP 0 fails.
			for i := 0; i < 4; i++ {
				r.post(t, i, 1024)
			}
			tt.fail(t, r)
			bad := r.rcv.qps[0].qp
			waitState(t, bad, verbs.QPSErr)
			if tt.first != 0 {
				if ev := srqNextEvent(t, r.rcv.ctx, 5*time.Second); ev.Type != tt.first || ev.QP != bad {
					t.Fatalf("event %s on %p, want %s on the failed QP", ev.Type, ev.QP, tt.first)
				}
			}
			if ev := srqNextEvent(t, r.rcv.ctx, 5*time.Second); ev.Type != verbs.EventQPLastWQEReached || ev.QP != bad || ev.SRQ != nil {
				t.Fatalf("event %s (QP %p, SRQ %p), want LAST_WQE_REACHED on the failed QP %p", ev.Type, ev.QP, ev.SRQ, bad)
			}
			// Once: more work on the failed QP raises nothing more.
			if err := bad.PostSend([]verbs.SendWR{{WRID: 50, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{r.rcv.mr.SGE(0, 8)}}}); err != nil {
				t.Fatal(err)
			}
			if wc := srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCWRFlushErr || wc.WRID != 50 {
				t.Fatalf("send on the failed QP: %+v, want FLUSH_ERR", wc)
			}
			time.Sleep(10 * time.Millisecond)
			srqNoEvent(t, r.rcv.ctx, "after more work on the failed QP")
			// The SRQ's WRs were not flushed: the other QP takes WR 0.
			if n := r.rcv.cq.Len(); n != 0 {
				t.Fatalf("the failed QP flushed SRQ WRs: %s", describe(srqWaitCQ(t, r.rcv.cq, n, time.Second)))
			}
			for k := 0; k < 4; k++ {
				r.send(t, 1, uint64(10+k), 0, 16)
				if wc := srqWaitCQ(t, r.rcv.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != uint64(k) || wc.QPNum != r.rcv.qps[1].qp.Num() {
					t.Fatalf("message %d on the healthy QP: %+v, want WR %d", k, wc, k)
				}
			}
		})
	}
}

// srqRNRCounter counts the RNR NAKs a Faults.Filter sees.
type srqRNRCounter struct{ n atomic.Int64 }

func (c *srqRNRCounter) load() int64 { return c.n.Load() }

// countRNRNAKs is a Faults.Filter that counts RNR NAKs and passes every
// packet.
func (c *srqRNRCounter) countRNRNAKs(p []byte, from, to netip.Addr) bool {
	var pkt wire.Packet
	if pkt.Decode(p) == nil && pkt.OpCode() == wire.RCAcknowledge && pkt.AETH != nil && pkt.AETH.Syndrome().Kind() == wire.KindRNRNAK {
		c.n.Add(1)
	}
	return true
}
