package verbs

import (
	"fmt"
	"io"
)

// Counter names one of the statistics a RoCE device keeps, those Linux's
// Soft-RoCE driver keeps and `rdma statistic` shows, in its order and with
// its names.
type Counter int

const (
	CounterSentPkts            Counter = iota // sent_pkts: packets sent
	CounterRcvdPkts                           // rcvd_pkts: packets received for a QP
	CounterDuplicateRequest                   // duplicate_request: requests received again (the ACK was lost)
	CounterOutOfSeqRequest                    // out_of_seq_request: requests received ahead of the expected PSN (some were lost)
	CounterRcvdRNRErr                         // rcvd_rnr_err: RNR NAKs received (the peer had no receive posted)
	CounterSendRNRErr                         // send_rnr_err: RNR NAKs sent
	CounterRcvdSeqErr                         // rcvd_seq_err: PSN sequence error NAKs received
	CounterAckDeferred                        // ack_deferred: ACKs folded into a later one
	CounterRetryExceededErr                   // retry_exceeded_err: work requests failed with IBV_WC_RETRY_EXC_ERR
	CounterRetryRNRExceededErr                // retry_rnr_exceeded_err: work requests failed with IBV_WC_RNR_RETRY_EXC_ERR
	CounterCompleterRetryErr                  // completer_retry_err: retransmissions, after a timeout (or an early go-back or a tail probe) or a NAK
	CounterSendErr                            // send_err: sends (batches of packets) the network layer refused
	CounterLinkDowned                         // link_downed: times the port went down
	CounterRDMASends                          // rdma_sends: RDMA WRITE and READ operations started
	CounterRDMARecvs                          // rdma_recvs: RDMA WRITE and READ requests served

	// NumCounters is the number of counters.
	NumCounters
)

var counterNames = [NumCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
	"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err",
	"completer_retry_err", "send_err", "link_downed", "rdma_sends", "rdma_recvs",
}

// String returns the counter's name as `rdma statistic` prints it
// ("sent_pkts").
func (c Counter) String() string {
	if c < 0 || c >= NumCounters {
		return fmt.Sprintf("counter_%d", int(c))
	}
	return counterNames[c]
}

// Counters holds one value per Counter.
type Counters [NumCounters]uint64

// WriteTo writes one "name value" line per counter, as `rdma statistic`
// lists them.
func (c *Counters) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for i, v := range c {
		k, err := fmt.Fprintf(w, "%s %d\n", Counter(i), v)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Map returns the counters by name, for expvar and the like.
func (c *Counters) Map() map[string]uint64 {
	m := make(map[string]uint64, NumCounters)
	for i, v := range c {
		m[Counter(i).String()] = v
	}
	return m
}

// QueryCounters returns the device's statistics since the program first
// opened it (what `rdma statistic show link rxe0/1` shows for Linux's
// Soft-RoCE device). It needs no open context; a device whose provider
// keeps no counters returns ErrNotSupported.
func (d *Device) QueryCounters() (Counters, error) {
	if c, ok := d.drv.(CountersDriver); ok {
		return c.Counters(), nil
	}
	return Counters{}, Errorf("rdma statistic", ErrNotSupported, d.name+": the provider keeps no counters")
}

// QueryCounters returns the QP's statistics (what `rdma statistic show qp`
// shows with a counter bound to the QP on Linux).
func (qp *QP) QueryCounters() (Counters, error) {
	if c, ok := qp.drv.(CountersDriver); ok {
		return c.Counters(), nil
	}
	return Counters{}, Errorf("rdma statistic", ErrNotSupported, "the provider keeps no QP counters")
}
