package rxe

import (
	"fmt"
	"os"
	"sync"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// XRC on the software device. An XRC_SEND QP is an RC requester whose
// packets carry XRC opcodes and an XRCETH naming the remote SRQ; an
// XRC_RECV QP is an RC responder with no queues of its own, which takes
// each request's receive WQE, completion queue and memory-checking PD
// from the XRC SRQ its XRCETH names, if that SRQ belongs to the QP's
// domain (otherwise it NAKs the request as invalid). XRC SRQs are found by
// number in the device's table; domains opened through the same file are
// one domain for every context of the process.

// xrcd is an XRC domain.
type xrcd struct {
	hw   *hw
	file fileKey // the file it was opened through; zero for none
	refs int     // opens of it (h.mu)
}

// fileKey names a file (inode) that XRC domains are shared through.
type fileKey struct{ dev, ino uint64 }

// xrcdOpen implements verbs.XRCDDriver: one open of a domain.
type xrcdOpen struct {
	ctx *devctx
	d   *xrcd

	mu     sync.Mutex
	closed bool
}

// OpenXRCD implements verbs.XRCDriver (ibv_open_xrcd). A domain opened
// through a file is shared with every other open of the same file by any
// context of this process; other processes have domains of their own, as
// they have QPs and SRQs of their own.
func (c *devctx) OpenXRCD(attr *verbs.XRCDInitAttr) (verbs.XRCDDriver, error) {
	h := c.hw
	h.mu.Lock()
	defer h.mu.Unlock()
	d := &xrcd{hw: h}
	if attr.FD >= 0 {
		k, err := fileIdentity(attr.FD)
		if err != nil {
			return nil, err
		}
		switch old := h.xrcds[k]; {
		case old == nil && attr.OFlags&os.O_CREATE == 0:
			return nil, verbs.Errorf("ibv_open_xrcd", verbs.ErrInvalidArgument, fmt.Sprintf("fd %d: no XRC domain is open through its file, and oflags lacks O_CREAT", attr.FD))
		case old != nil && attr.OFlags&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
			return nil, verbs.Errorf("ibv_open_xrcd", verbs.ErrInvalidArgument, fmt.Sprintf("fd %d: an XRC domain is open through its file already (O_EXCL)", attr.FD))
		case old != nil:
			d = old
		default:
			d.file = k
			h.xrcds[k] = d
		}
	}
	d.refs++
	o := &xrcdOpen{ctx: c, d: d}
	c.mu.Lock()
	c.xrcdOpens = append(c.xrcdOpens, o)
	c.mu.Unlock()
	return o, nil
}

// Close implements verbs.XRCDDriver (ibv_close_xrcd).
func (o *xrcdOpen) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.mu.Unlock()
	h := o.d.hw
	h.mu.Lock()
	if o.d.refs--; o.d.refs == 0 && o.d.file != (fileKey{}) {
		delete(h.xrcds, o.d.file)
	}
	h.mu.Unlock()
	c := o.ctx
	c.mu.Lock()
	for i, x := range c.xrcdOpens {
		if x == o {
			c.xrcdOpens = append(c.xrcdOpens[:i], c.xrcdOpens[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	return nil
}

// live reports an error if the open was closed (its context went).
func (o *xrcdOpen) live(op string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return verbs.Errorf(op, verbs.ErrClosed, "XRC domain closed")
	}
	return nil
}

// CreateSRQ implements verbs.XRCDDriver (ibv_create_srq_ex with
// IBV_SRQT_XRC): an SRQ of the domain, numbered in the device's table.
func (o *xrcdOpen) CreateSRQ(attr *verbs.SRQInitAttrEx) (verbs.XRCSRQDriver, error) {
	const op = "ibv_create_srq_ex"
	if err := o.live(op); err != nil {
		return nil, err
	}
	p, ok1 := verbs.PDDriverOf(attr.PD).(*pd)
	cq, ok2 := verbs.CQDriverOf(attr.CQ).(*swcq.CQ)
	if !ok1 || !ok2 || p.ctx.hw != o.d.hw {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "the PD or CQ belongs to another device")
	}
	a, err := checkSRQAttr(op, attr.Attr)
	if err != nil {
		return nil, err
	}
	h := o.d.hw
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nsrq >= maxSRQ {
		return nil, verbs.Errorf(op, verbs.ErrNoMemory, "too many SRQs")
	}
	s := &srq{ctx: o.ctx, attr: a, xrcd: o.d, pd: p, cq: cq}
	for s.num == 0 {
		n := h.nextSRQN
		if h.nextSRQN++; h.nextSRQN > maxSRQN {
			h.nextSRQN = 1
		}
		if _, taken := h.srqs[n]; !taken {
			s.num = n
		}
	}
	h.srqs[s.num] = s
	h.nsrq++
	attr.Attr = a
	return s, nil
}

// maxSRQN is the largest SRQ number: the XRCETH carries 24 bits.
const maxSRQN = 0xffffff

// Num implements verbs.XRCSRQDriver (ibv_get_srq_num).
func (s *srq) Num() uint32 { return s.num }

// xrcSRQ returns the domain's XRC SRQ numbered n, or nil.
func (q *qp) xrcSRQ(n uint32) *srq {
	h := q.hw
	h.mu.RLock()
	s := h.srqs[n]
	h.mu.RUnlock()
	if s == nil || s.xrcd != q.xrcd {
		return nil
	}
	return s
}

// xrcHandle implements verbs.QPDriver: one handle on an XRC_RECV QP. The
// QP's methods serve every handle; Destroy closes this one, and the QP
// goes with the last.
type xrcHandle struct {
	*qp
	ctx    *devctx
	closed bool // q.mu
}

// CreateQP implements verbs.XRCDDriver (ibv_create_qp_ex of an
// IBV_QPT_XRC_RECV QP): a responder with no queues, no PD and no CQs.
func (o *xrcdOpen) CreateQP(attr *verbs.QPInitAttr) (verbs.QPDriver, error) {
	if err := o.live("ibv_create_qp_ex"); err != nil {
		return nil, err
	}
	q := &qp{ctx: o.ctx, hw: o.d.hw, typ: verbs.QPTXRCRecv, xrcd: o.d, sigAll: attr.SQSigAll}
	hd := &xrcHandle{qp: q, ctx: o.ctx}
	q.handles = []*xrcHandle{hd}
	if err := q.start(); err != nil {
		return nil, err
	}
	attr.Cap = verbs.QPCap{}
	return hd, nil
}

// OpenQP implements verbs.XRCDDriver (ibv_open_qp).
func (o *xrcdOpen) OpenQP(num uint32) (verbs.QPDriver, error) {
	if err := o.live("ibv_open_qp"); err != nil {
		return nil, err
	}
	h := o.d.hw
	h.mu.RLock()
	q := h.qps[num]
	h.mu.RUnlock()
	if q == nil || q.typ != verbs.QPTXRCRecv || q.xrcd != o.d {
		return nil, verbs.Errorf("ibv_open_qp", verbs.ErrNoEntry, fmt.Sprintf("the XRC domain has no XRC_RECV QP %#x", num))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return nil, verbs.Errorf("ibv_open_qp", verbs.ErrNoEntry, fmt.Sprintf("XRC_RECV QP %#x is being destroyed", num))
	}
	hd := &xrcHandle{qp: q, ctx: o.ctx}
	q.handles = append(q.handles, hd)
	return hd, nil
}

// live reports an error if the handle was closed with its context: the
// QP it names may serve other contexts' handles still.
func (hd *xrcHandle) live(op string) error {
	hd.qp.mu.Lock()
	defer hd.qp.mu.Unlock()
	if hd.closed {
		return verbs.Errorf(op, verbs.ErrClosed, "the QP handle's context is closed")
	}
	return nil
}

// Modify implements verbs.QPDriver (ibv_modify_qp) for this handle.
func (hd *xrcHandle) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if err := hd.live("ibv_modify_qp"); err != nil {
		return err
	}
	return hd.qp.Modify(attr, mask)
}

// Query implements verbs.QPDriver (ibv_query_qp) for this handle.
func (hd *xrcHandle) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	if err := hd.live("ibv_query_qp"); err != nil {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, err
	}
	return hd.qp.Query()
}

// Destroy implements verbs.QPDriver: it closes the handle, and destroys
// the QP if no other handle is left.
func (hd *xrcHandle) Destroy() error {
	q := hd.qp
	q.mu.Lock()
	if hd.closed {
		q.mu.Unlock()
		return nil
	}
	hd.closed = true
	for i, x := range q.handles {
		if x == hd {
			q.handles = append(q.handles[:i], q.handles[i+1:]...)
			break
		}
	}
	// The QP is marked destroyed with its last handle gone, so that no
	// OpenQP takes a handle on it in between.
	last := len(q.handles) == 0 && !q.destroyed
	if last {
		q.destroyed = true
	}
	q.mu.Unlock()
	if last {
		q.teardown()
	}
	return nil
}

// eventSinks returns where the QP's asynchronous events go: its context,
// or for an XRC_RECV QP the contexts that hold a handle on it.
func (q *qp) eventSinks() []verbs.EventSink {
	if q.typ != verbs.QPTXRCRecv {
		if q.ctx.events == nil {
			return nil
		}
		return []verbs.EventSink{q.ctx.events}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []verbs.EventSink
	seen := map[*devctx]bool{}
	for _, hd := range q.handles {
		if !seen[hd.ctx] && hd.ctx.events != nil {
			seen[hd.ctx] = true
			out = append(out, hd.ctx.events)
		}
	}
	return out
}

// closeXRC releases what context c holds of the device's XRC objects, as
// its Close does: its handles on XRC_RECV QPs (returned: the QPs no handle
// is left on, marked destroyed, to tear down), its XRC SRQs and its opens
// of domains.
func (c *devctx) closeXRC() []*qp {
	h := c.hw
	h.mu.Lock()
	var recv []*qp
	for _, q := range h.qps {
		if q.typ == verbs.QPTXRCRecv {
			recv = append(recv, q)
		}
	}
	var srqs []*srq
	for _, s := range h.srqs {
		if s.ctx == c {
			srqs = append(srqs, s)
		}
	}
	h.mu.Unlock()
	// q.mu is taken without h.mu held: a poster may hold q.mu and want
	// h.mu.
	var orphans []*qp
	for _, q := range recv {
		q.mu.Lock()
		k := 0
		for _, hd := range q.handles {
			if hd.ctx == c {
				hd.closed = true
				continue
			}
			q.handles[k] = hd
			k++
		}
		clear(q.handles[k:])
		q.handles = q.handles[:k]
		if k == 0 && !q.destroyed {
			q.destroyed = true // no OpenQP may find it from now on
			orphans = append(orphans, q)
		}
		q.mu.Unlock()
	}
	for _, s := range srqs {
		s.Destroy()
	}
	c.mu.Lock()
	opens := append([]*xrcdOpen(nil), c.xrcdOpens...)
	c.mu.Unlock()
	for _, o := range opens {
		o.Close()
	}
	return orphans
}

var (
	_ verbs.XRCDriver    = (*devctx)(nil)
	_ verbs.XRCDDriver   = (*xrcdOpen)(nil)
	_ verbs.XRCSRQDriver = (*srq)(nil)
	_ verbs.QPDriver     = (*xrcHandle)(nil)
)
