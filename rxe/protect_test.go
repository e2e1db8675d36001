package rxe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// TestRemoteAccessViolations checks each protection rule the responder
// enforces: the requester completes with REM_ACCESS_ERR, the responder's
// memory is untouched, both QPs end in ERR, and the responder reports
// IBV_EVENT_QP_ACCESS_ERR.
func TestRemoteAccessViolations(t *testing.T) {
	tests := []struct {
		name string
		// wr builds the offending request from the two ends.
		wr func(a, b *end) verbs.SendWR
		// access of b's region (default: everything).
		access verbs.AccessFlags
	}{
		{"write with a wrong rkey", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x5a5a}
		}, 0},
		{"write past the end of the region", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr() + uint64(b.mr.Len()) - 32, RKey: b.mr.RKey()}
		}, 0},
		{"write before the start of the region", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr() - 8, RKey: b.mr.RKey()}
		}, 0},
		{"write to a region without remote write", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}, verbs.AccessLocalWrite | verbs.AccessRemoteRead},
		{"read from a region without remote read", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}, verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
		{"atomic on a region without remote atomic", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1}
		}, verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
		{"atomic with a wrong rkey", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 1, Swap: 1}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			la, lb := udpLinks(t)
			a, b := newPair(t, la, lb, pairOpts{})
			if tt.access != 0 {
				// Re-register b's memory with the restricted rights.
				if err := b.mr.Dereg(); err != nil {
					t.Fatal(err)
				}
				mr, err := b.pd.RegMR(b.buf, tt.access)
				if err != nil {
					t.Fatal(err)
				}
				b.mr = mr
			}
			fill(a.buf[:64], 9)
			for i := range b.buf {
				b.buf[i] = 0xee
			}
			wr := tt.wr(a, b)
			wr.WRID, wr.SendFlags = 42, verbs.SendSignaled
			if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			wc := a.wait(1, 5*time.Second)[0]
			if wc.Status != verbs.WCRemAccessErr || wc.WRID != 42 {
				t.Fatalf("completion %+v, want REM_ACCESS_ERR", wc)
			}
			for i, v := range b.buf {
				if v != 0xee {
					t.Fatalf("responder memory changed at %d", i)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ev, err := b.ctx.GetAsyncEvent(ctx)
			for err == nil && ev.Type == verbs.EventPortActive {
				ev, err = b.ctx.GetAsyncEvent(ctx)
			}
			if err != nil || ev.Type != verbs.EventQPAccessErr || ev.QP != b.qp {
				t.Fatalf("async event %+v %v, want QP_ACCESS_ERR on b's QP", ev, err)
			}
			waitState(t, a.qp, verbs.QPSErr)
			waitState(t, b.qp, verbs.QPSErr)
		})
	}
}

func waitState(t *testing.T, qp *verbs.QP, want verbs.QPState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for qp.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("QP %#x in %s, want %s", qp.Num(), qp.State(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLocalErrors(t *testing.T) {
	t.Run("bad lkey completes with LOC_PROT_ERR and flushes the rest", func(t *testing.T) {
		la, lb := udpLinks(t)
		a, _ := newPair(t, la, lb, pairOpts{})
		bad := a.mr.SGE(0, 64)
		bad.LKey ^= 0xff00
		err := a.qp.PostSend([]verbs.SendWR{
			{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{bad}},
			{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		wcs := a.wait(2, 5*time.Second)
		if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCLocProtErr || wcs[1].WRID != 2 || wcs[1].Status != verbs.WCWRFlushErr {
			t.Fatalf("completions %s", describe(wcs))
		}
	})
	t.Run("SEND larger than the receive buffer", func(t *testing.T) {
		la, lb := udpLinks(t)
		a, b := newPair(t, la, lb, pairOpts{})
		b.qp.PostRecv([]verbs.RecvWR{{WRID: 5, SGList: []verbs.SGE{b.mr.SGE(0, 100)}}})
		a.qp.PostSend([]verbs.SendWR{{WRID: 6, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 3000)}}})
		if wc := b.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCLocLenErr || wc.WRID != 5 {
			t.Fatalf("receiver completion %+v, want LOC_LEN_ERR", wc)
		}
		if wc := a.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCRemInvReqErr || wc.WRID != 6 {
			t.Fatalf("sender completion %+v, want REM_INV_REQ_ERR", wc)
		}
	})
	t.Run("deregistered region refuses remote access at once", func(t *testing.T) {
		la, lb := udpLinks(t)
		a, b := newPair(t, la, lb, pairOpts{})
		rkey, addr := b.mr.RKey(), b.mr.Addr()
		mr2, err := b.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite) // keep the PD busy
		if err != nil {
			t.Fatal(err)
		}
		defer mr2.Dereg()
		if err := b.mr.Dereg(); err != nil {
			t.Fatal(err)
		}
		b.mr, _ = b.pd.RegMR(make([]byte, 8), verbs.AccessLocalWrite) // for cleanup
		a.qp.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: addr, RKey: rkey}})
		if wc := a.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCRemAccessErr {
			t.Fatalf("completion %+v, want REM_ACCESS_ERR", wc)
		}
	})
}

func TestPostSendRejectsBadWorkRequests(t *testing.T) {
	la, lb := udpLinks(t)
	a, b := newPair(t, la, lb, pairOpts{sendWR: 64})
	sge := a.mr.SGE(0, 8)
	tests := []struct {
		name string
		wr   verbs.SendWR
		want verbs.Errno
	}{
		{"misaligned atomic", verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{sge}, RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey()}, verbs.ErrInvalidArgument},
		{"atomic of 4 bytes", verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{a.mr.SGE(0, 4)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}, verbs.ErrInvalidArgument},
		{"too many SGEs", verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{sge, sge, sge, sge, sge}}, verbs.ErrInvalidArgument},
		{"unknown opcode", verbs.SendWR{Opcode: 77, SGList: []verbs.SGE{sge}}, verbs.ErrInvalidArgument},
		{"inline above max_inline", verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{a.mr.SGE(0, 65)}}, verbs.ErrInvalidArgument},
		{"message above 8 MiB", verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 8<<20 + 1, LKey: a.mr.LKey()}}}, verbs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{sge}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}, tt.wr})
			var wre *verbs.WRError
			if !errors.As(err, &wre) || wre.Index != 1 || !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want a WRError at index 1 wrapping %v", err, tt.want)
			}
		})
	}
}

func TestPostSendRefusesAFullQueue(t *testing.T) {
	la, lb := udpLinks(t)
	a, b := newPair(t, la, lb, pairOpts{sendWR: 4})
	b.qp.Destroy() // nothing will be acknowledged
	wrs := make([]verbs.SendWR, 5)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: 1, RKey: 1}
	}
	err := a.qp.PostSend(wrs)
	var wre *verbs.WRError
	if !errors.As(err, &wre) || wre.Index != 4 || !errors.Is(err, verbs.ErrNoMemory) {
		t.Fatalf("posting 5 WRs on a 4-deep queue: %v, want ENOMEM at index 4", err)
	}
}

func TestRetryExhaustion(t *testing.T) {
	t.Run("RNR retries run out without a receive", func(t *testing.T) {
		la, lb := udpLinks(t)
		a, _ := newPair(t, la, lb, pairOpts{rnrRetry: 2, minRNR: 1})
		a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}})
		if wc := a.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCRNRRetryExcErr {
			t.Fatalf("completion %+v, want RNR_RETRY_EXC_ERR", wc)
		}
	})
	t.Run("RNR waits until a receive is posted", func(t *testing.T) {
		la, lb := udpLinks(t)
		a, b := newPair(t, la, lb, pairOpts{rnrRetry: 7, minRNR: 1})
		a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}})
		time.Sleep(20 * time.Millisecond)
		b.qp.PostRecv([]verbs.RecvWR{{WRID: 2, SGList: []verbs.SGE{b.mr.SGE(0, 8)}}})
		if wc := a.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
		if wc := b.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != 8 {
			t.Fatalf("receive %+v", wc)
		}
	})
	t.Run("transport retries run out when the peer is gone", func(t *testing.T) {
		la, lb := udpLinks(t)
		a, b := newPair(t, la, lb, pairOpts{retry: 2, timeout: 8})
		b.qp.Destroy()
		a.qp.PostSend([]verbs.SendWR{
			{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: 1, RKey: 1},
			{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: 1, RKey: 1},
		})
		wcs := a.wait(2, 5*time.Second)
		if wcs[0].Status != verbs.WCRetryExcErr || wcs[1].Status != verbs.WCWRFlushErr {
			t.Fatalf("completions %s", describe(wcs))
		}
	})
}
