package rxe

import (
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// The counters tell what the transport did: over a network that loses
// and duplicates packets, 20 RDMA WRITEs of 64 KiB count as 20 rdma_sends
// on one side and 20 rdma_recvs on the other, and the losses show up as
// retransmissions and out-of-sequence and duplicate requests; the device
// sums its QPs.
func TestCountersTellWhatTheTransportDid(t *testing.T) {
	a, b, _ := memPair(t, 77, link.Faults{Drop: 0.05, Duplicate: 0.05}, pairOpts{})
	const writes, size = 20, 64 << 10
	for i := range writes {
		err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		if err != nil {
			t.Fatal(err)
		}
		if wc := a.wait(1, 20*time.Second)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("write %d: %s", i, wc.Status)
		}
	}
	ca, err := a.qp.QueryCounters()
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := b.qp.QueryCounters()
	if ca[verbs.CounterRDMASends] != writes || cb[verbs.CounterRDMARecvs] < writes {
		t.Errorf("rdma_sends %d, rdma_recvs %d; want %d each", ca[verbs.CounterRDMASends], cb[verbs.CounterRDMARecvs], writes)
	}
	pkts := uint64(writes * size / 1024) // path MTU 1024
	if ca[verbs.CounterSentPkts] < pkts || cb[verbs.CounterRcvdPkts] == 0 || cb[verbs.CounterSentPkts] == 0 {
		t.Errorf("sent_pkts %d (want at least %d), peer rcvd_pkts %d, sent_pkts %d",
			ca[verbs.CounterSentPkts], pkts, cb[verbs.CounterRcvdPkts], cb[verbs.CounterSentPkts])
	}
	if ca[verbs.CounterCompleterRetryErr] == 0 || cb[verbs.CounterOutOfSeqRequest] == 0 || cb[verbs.CounterDuplicateRequest] == 0 {
		t.Errorf("losses left no trace: completer_retry_err %d, out_of_seq_request %d, duplicate_request %d",
			ca[verbs.CounterCompleterRetryErr], cb[verbs.CounterOutOfSeqRequest], cb[verbs.CounterDuplicateRequest])
	}
	dev, err := a.ctx.Device().QueryCounters()
	if err != nil {
		t.Fatal(err)
	}
	if dev[verbs.CounterSentPkts] < ca[verbs.CounterSentPkts] {
		t.Errorf("device sent_pkts %d below its QP's %d", dev[verbs.CounterSentPkts], ca[verbs.CounterSentPkts])
	}
}
