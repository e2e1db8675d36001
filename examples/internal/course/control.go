package course

import (
	"context"
	"fmt"
	"math"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// Control is the course's struct our_control: one connection's
// identifier, channels, verbs objects, buffers, work requests and
// counters. The client has one, the listener one, and the agent one for
// the connection the listener hands it.
type Control struct {
	o *Options

	ID          *rdmacm.ID           // cm_id
	Channel     *rdmacm.EventChannel // cm_event_channel (ping-sr-2e on); nil: the ID is synchronous
	PD          *verbs.PD            // protection_domain
	CompChannel *verbs.CompChannel   // completion_channel (ping-sr-3 on); nil: the CQ is only polled
	CQ          *verbs.CQ            // completion_queue
	QP          *verbs.QP            // queue_pair

	// Limit and DataSize are how many messages of how many bytes: the
	// options', or for an agent the client's connect info (ping-sr-1 on).
	Limit, DataSize uint64

	// Keepalive makes Client and Accept enable keepalives (ping-sr-2 on).
	Keepalive bool

	// WaitEvent takes the next event from Channel. Nil means GetEvent,
	// which blocks (ping-sr-2e to 3); ping-sr-4 sets one that waits in a
	// select on the channel's Ready and takes the event with PollEvent.
	WaitEvent func(ctx context.Context) (*rdmacm.Event, error)

	userData   [][]byte    // user_data
	userDataMR []*verbs.MR // user_data_mr
	sendWR     []verbs.SendWR
	recvWR     []verbs.RecvWR

	WCSend, WCRecv uint64 // wc_send, wc_recv: completions counted
	Stats          PollStats

	// CQEventsThatNeedAck counts completion events not yet acknowledged
	// (cq_events_that_need_ack); UnsetupQP acknowledges them.
	CQEventsThatNeedAck int

	cm            cmState
	keepalive     keepalive
	sendsInFlight int // SENDs and keepalives posted and not completed
}

// NewControl makes an empty control structure (our_create_control_struct),
// with the options' count and message size.
func NewControl(o *Options) *Control {
	c := &Control{o: o, Limit: o.Limit, DataSize: o.DataSize}
	c.cm.init()
	return c
}

// Options returns the options the structure was made with.
func (c *Control) Options() *Options { return c.o }

// Work request IDs: a SEND's is its buffer's index, a receive's
// RecvWRIDBase plus its buffer's index, so that a completion says which
// queue it is from even when it failed (a failed completion's opcode is
// not defined).
const (
	RecvWRIDBase  = 1 << 32
	KeepaliveWRID = math.MaxUint64 // the keepalive RDMA WRITE
)

// SetupQP allocates the protection domain on the ID's device, creates the
// completion queue (bound to a new completion channel and armed with
// ibv_req_notify_cq if withCompChannel, as ping-sr-3 and 4 do) and the
// ID's queue pair on them (our_setup_qp: our_alloc_pd, our_create_cq,
// our_create_qp). The queues hold window work requests and a keepalive.
func (c *Control) SetupQP(withCompChannel bool) (err error) {
	o := c.o
	ctx := c.ID.Verbs()
	if c.PD, err = ctx.AllocPD(); err != nil { // ibv_alloc_pd
		o.ReportError("ibv_alloc_pd", err)
		return err
	}
	o.Trace("ibv_alloc_pd", "allocated protection domain", fmt.Sprintf("%p", c.PD))
	defer func() {
		if err != nil {
			c.UnsetupQP()
		}
	}()
	if withCompChannel {
		if c.CompChannel, err = ctx.CreateCompChannel(); err != nil { // ibv_create_comp_channel
			o.ReportError("ibv_create_comp_channel", err)
			return err
		}
		o.Trace("ibv_create_comp_channel", "created completion channel", fmt.Sprintf("%p", c.CompChannel))
	}
	sendDepth, recvDepth := o.Window+1, o.Window                                     // +1: the keepalive
	if c.CQ, err = ctx.CreateCQ(sendDepth+recvDepth, c.CompChannel, 0); err != nil { // ibv_create_cq
		o.ReportError("ibv_create_cq", err)
		return err
	}
	o.Trace("ibv_create_cq", "returned cqe", c.CQ.Cap())
	if withCompChannel {
		// Ask for an event when the first completion arrives.
		if err = c.CQ.ReqNotify(false); err != nil { // ibv_req_notify_cq
			o.ReportError("ibv_req_notify_cq", err)
			return err
		}
	}
	attr := verbs.QPInitAttr{ // our_setup_qp_params
		QPContext: c,
		SendCQ:    c.CQ,
		RecvCQ:    c.CQ,
		Cap:       verbs.QPCap{MaxSendWR: uint32(sendDepth), MaxRecvWR: uint32(recvDepth), MaxSendSGE: 1, MaxRecvSGE: 1},
		QPType:    verbs.QPTRC,
	}
	if err = c.ID.CreateQP(c.PD, &attr); err != nil { // rdma_create_qp
		o.ReportError("rdma_create_qp", err)
		return err
	}
	c.QP = c.ID.QP()
	o.Trace("rdma_create_qp", "created queue pair", fmt.Sprintf("0x%06x", c.QP.Num()))
	o.Trace("rdma_create_qp", "max_send_wr", attr.Cap.MaxSendWR)
	o.Trace("rdma_create_qp", "max_recv_wr", attr.Cap.MaxRecvWR)
	return nil
}

// UnsetupQP destroys the queue pair, the completion queue (acknowledging
// its events first), the completion channel and the protection domain
// (our_unsetup_qp).
func (c *Control) UnsetupQP() {
	o := c.o
	if c.QP != nil {
		if err := c.ID.DestroyQP(); err != nil { // rdma_destroy_qp
			o.ReportError("rdma_destroy_qp", err)
		}
		c.QP = nil
	}
	if c.CQ != nil {
		if c.CQEventsThatNeedAck > 0 {
			c.CQ.AckEvents(c.CQEventsThatNeedAck) // ibv_ack_cq_events
			c.CQEventsThatNeedAck = 0
		}
		if err := c.CQ.Destroy(); err != nil { // ibv_destroy_cq
			o.ReportError("ibv_destroy_cq", err)
		}
		c.CQ = nil
	}
	if c.CompChannel != nil {
		if err := c.CompChannel.Close(); err != nil { // ibv_destroy_comp_channel
			o.ReportError("ibv_destroy_comp_channel", err)
		}
		c.CompChannel = nil
	}
	if c.PD != nil {
		if err := c.PD.Dealloc(); err != nil { // ibv_dealloc_pd
			o.ReportError("ibv_dealloc_pd", err)
		}
		c.PD = nil
	}
}

// setupUserData registers one buffer of DataSize bytes per access flag
// (our_setup_user_data, our_setup_mr_sge).
func (c *Control) setupUserData(access ...verbs.AccessFlags) error {
	for _, a := range access {
		buf := make([]byte, c.DataSize)
		mr, err := c.PD.RegMR(buf, a) // ibv_reg_mr
		if err != nil {
			c.o.ReportError("ibv_reg_mr", err)
			c.UnsetupBuffers()
			return err
		}
		c.o.Trace("ibv_reg_mr", "registered bytes", c.DataSize)
		c.userData = append(c.userData, buf)
		c.userDataMR = append(c.userDataMR, mr)
	}
	return nil
}

// sendWRFor and recvWRFor fill in one work request for buffer i
// (our_setup_send_wr, our_setup_recv_wr): signaled SENDs, wr_id i.
func (c *Control) sendWRFor(i int) verbs.SendWR {
	return verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.userDataMR[i].SGE(0, int(c.DataSize))}}
}

func (c *Control) recvWRFor(i int) verbs.RecvWR {
	return verbs.RecvWR{WRID: RecvWRIDBase + uint64(i), SGList: []verbs.SGE{c.userDataMR[i].SGE(0, int(c.DataSize))}}
}

// SetupClientBuffers registers the ping-pong client's two buffers, the
// first to SEND the ping from and the second to receive the pong into,
// and their work requests (our_setup_client_buffers).
func (c *Control) SetupClientBuffers() error {
	if err := c.setupUserData(0, verbs.AccessLocalWrite); err != nil {
		return err
	}
	c.sendWR = []verbs.SendWR{c.sendWRFor(0)}
	c.recvWR = []verbs.RecvWR{c.recvWRFor(1)}
	return nil
}

// SetupAgentBuffers registers the ping-pong agent's one buffer, which
// receives the ping and SENDs it back as the pong, and its two work
// requests (our_setup_agent_buffers).
func (c *Control) SetupAgentBuffers() error {
	if err := c.setupUserData(verbs.AccessLocalWrite); err != nil {
		return err
	}
	c.sendWR = []verbs.SendWR{c.sendWRFor(0)}
	c.recvWR = []verbs.RecvWR{c.recvWRFor(0)}
	return nil
}

// SetupBlastBuffers registers a window of buffers: the client SENDs from
// them in turn, the agent receives into them.
func (c *Control) SetupBlastBuffers() error {
	access := make([]verbs.AccessFlags, c.o.Window)
	if c.o.Role == Server {
		for i := range access {
			access[i] = verbs.AccessLocalWrite
		}
	}
	if err := c.setupUserData(access...); err != nil {
		return err
	}
	for i := range access {
		c.sendWR = append(c.sendWR, c.sendWRFor(i))
		c.recvWR = append(c.recvWR, c.recvWRFor(i))
	}
	return nil
}

// UnsetupBuffers deregisters the buffers (our_unsetup_buffers).
func (c *Control) UnsetupBuffers() {
	for _, mr := range c.userDataMR {
		if err := mr.Dereg(); err != nil { // ibv_dereg_mr
			c.o.ReportError("ibv_dereg_mr", err)
		}
	}
	c.userData, c.userDataMR, c.sendWR, c.recvWR = nil, nil, nil, nil
}

// PostSend posts the SEND of buffer i (our_post_send).
func (c *Control) PostSend(i int) error {
	if err := c.QP.PostSend(c.sendWR[i : i+1]); err != nil { // ibv_post_send
		c.o.ReportError("ibv_post_send", err)
		return err
	}
	c.sendsInFlight++
	return nil
}

// PostRecv posts the receive into buffer i (our_post_recv).
func (c *Control) PostRecv(i int) error {
	if err := c.QP.PostRecv(c.recvWR[i : i+1]); err != nil { // ibv_post_recv
		c.o.ReportError("ibv_post_recv", err)
		return err
	}
	return nil
}

// ErrPeerGone is the error of a connection whose peer disconnected or
// stopped answering while this side waited (ECONNRESET).
var ErrPeerGone = verbs.ErrConnReset

// CheckCompletion reports a completion that failed and returns its error
// (our_check_completion_status). A flushed work request, or one whose
// retries ran out, means that the connection is gone: its error wraps
// ErrPeerGone, and names the event that said so if one did.
func (c *Control) CheckCompletion(wc *verbs.WC) error {
	if wc.Status == verbs.WCSuccess {
		return nil
	}
	detail := fmt.Sprintf("completion of wr_id %d: status %d %s", wc.WRID, wc.Status, wc.Status)
	if typ, status, _ := c.LatestCMEvent(); c.LatestCMEventErr() != nil {
		detail += fmt.Sprintf(", after %s (status %d)", typ, status) // the peer disconnected first
	}
	errno := verbs.ErrIO
	switch wc.Status {
	case verbs.WCWRFlushErr, verbs.WCRetryExcErr, verbs.WCRNRRetryExcErr:
		errno = ErrPeerGone
	}
	err := verbs.Errorf("ibv_poll_cq", errno, detail)
	c.o.ReportError("ibv_poll_cq", err)
	return err
}

// SetupClient sets up the client's queue pair and buffers (our_setup_qp,
// then our_setup_client_buffers, or the blast's window of buffers).
// Unsetup undoes it.
func (c *Control) SetupClient(withCompChannel bool) error {
	if err := c.SetupQP(withCompChannel); err != nil {
		return err
	}
	setup := c.SetupClientBuffers
	if c.o.Kind == Blast {
		setup = c.SetupBlastBuffers
	}
	if err := setup(); err != nil {
		c.UnsetupQP()
		return err
	}
	return nil
}

// SetupAgent sets up the agent's queue pair and buffers and posts the
// first receives before the connection is accepted (our_setup_qp,
// our_setup_agent_buffers or the blast's window, our_post_recv). If any
// step fails it rejects the connection request (rdma_reject), so that
// the client hears of it at once. Unsetup undoes it.
func (c *Control) SetupAgent(withCompChannel bool) (err error) {
	defer func() {
		if err != nil {
			c.Reject()
		}
	}()
	if err := c.SetupQP(withCompChannel); err != nil {
		return err
	}
	if c.o.Kind == Blast {
		err = c.SetupBlastBuffers()
		if err == nil {
			err = c.PostBlastReceives()
		}
	} else {
		err = c.SetupAgentBuffers()
		if err == nil {
			err = c.PostRecv(0) // the first ping's receive
		}
	}
	if err != nil {
		c.Unsetup()
	}
	return err
}

// Unsetup deregisters the buffers and destroys the queue pair and what
// SetupQP made for it (our_unsetup_buffers, our_unsetup_qp). What was not
// set up is skipped.
func (c *Control) Unsetup() {
	c.UnsetupBuffers()
	c.UnsetupQP()
}
