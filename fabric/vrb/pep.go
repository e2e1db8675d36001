package vrb

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/rdmacm"
)

// resolveTimeout bounds address and route resolution, as C's provider's
// rdma_getaddrinfo and rdma_resolve_* do.
const resolveTimeout = 2 * time.Second

// withHdr puts C's one-byte length in front of the program's private data.
func withHdr(op string, param []byte) ([]byte, error) {
	if len(param) > maxCMData {
		return nil, fabric.Errorf(op, fabric.ErrInvalid, "private data over 55 bytes")
	}
	return append([]byte{byte(len(param))}, param...), nil
}

// stripHdr takes the program's private data out of what the CM carried
// (padded by the IB CM; the first byte says how much is real).
func stripHdr(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	n := int(b[0])
	if n > len(b)-1 {
		n = len(b) - 1
	}
	if n == 0 {
		return nil
	}
	return append([]byte(nil), b[1:1+n]...)
}

type pep struct {
	info *fabric.Info
	ctx  any

	mu sync.Mutex
	fabric.PassiveBinds
	ch     *rdmacm.EventChannel
	id     *rdmacm.ID
	cancel context.CancelFunc
	wg     sync.WaitGroup
	reqs   []*connReq // requests handed out, answered or not
}

// connReq is a connection request: the new ID, the Handle of the
// FI_CONNREQ event's info.
type connReq struct {
	id    *rdmacm.ID
	taken atomic.Bool
}

func (provider) PassiveEndpoint(f *fabric.Fabric, info *fabric.Info, context any) (fabric.PassiveEndpointDriver, error) {
	ch, err := rdmacm.CreateEventChannel()
	if err != nil {
		return nil, fabric.Errorf("fi_passive_ep", fabric.ErrNoMemory, err.Error())
	}
	id, err := rdmacm.CreateID(ch, nil, rdmacm.PSTCP)
	if err != nil {
		ch.Close()
		return nil, fabric.Errorf("fi_passive_ep", fabric.ErrNoMemory, err.Error())
	}
	return &pep{info: info.Dup(), ctx: context, ch: ch, id: id}, nil
}

// Listen binds the info's source address and listens (rdma_bind_addr,
// rdma_listen).
func (p *pep) Listen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	src := fabric.ListenAddr(p.info)
	if err := p.id.BindAddr(src); err != nil {
		return fabric.Errorf("fi_listen", errnoOf(err, fabric.ErrAddrNotAvail), err.Error())
	}
	if err := p.id.Listen(128); err != nil {
		return fabric.Errorf("fi_listen", errnoOf(err, fabric.ErrAddrInUse), err.Error())
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(1)
	go p.loop(ctx)
	return nil
}

// loop turns CONNECT_REQUEST events into FI_CONNREQ.
func (p *pep) loop(ctx context.Context) {
	defer p.wg.Done()
	for {
		ev, err := p.ch.GetEvent(ctx)
		if err != nil {
			return
		}
		if ev.Type != rdmacm.EventConnectRequest {
			ev.Ack()
			continue
		}
		id := ev.ID
		data := stripHdr(ev.Param.PrivateData)
		ev.Ack()
		req := &connReq{id: id}
		info := p.info.Dup()
		info.Handle = req
		info.DestAddr = id.PeerAddr()
		info.SrcAddr = id.LocalAddr()
		if v := id.Verbs(); v != nil {
			info.DomainAttr.Name = v.Device().Name()
		}
		p.mu.Lock()
		p.reqs = append(p.reqs, req)
		p.mu.Unlock()
		p.Queue().Write(fabric.EQEntry{Event: fabric.EventConnReq, FID: p, Info: info, Data: data})
	}
}

func (p *pep) Name() (netip.AddrPort, error) {
	return p.id.LocalAddr(), nil
}

// Reject refuses the request (rdma_reject) with private data.
func (p *pep) Reject(handle any, param []byte) error {
	r, ok := handle.(*connReq)
	if !ok || !r.taken.CompareAndSwap(false, true) {
		return fabric.Errorf("fi_reject", fabric.ErrInvalid, "not a pending connection request")
	}
	data, err := withHdr("fi_reject", param)
	if err != nil {
		return err
	}
	defer r.id.Destroy()
	if err := r.id.Reject(data); err != nil {
		return fabric.Errorf("fi_reject", fabric.ErrIO, err.Error())
	}
	return nil
}

// Close is called once (fabric.PassiveEndpointDriver).
func (p *pep) Close() error {
	p.mu.Lock()
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
	// Requests nobody answered are rejected, so that their clients hear
	// of it, and their IDs freed.
	empty, _ := withHdr("fi_close", nil)
	for _, r := range p.reqs {
		if r.taken.CompareAndSwap(false, true) {
			r.id.Reject(empty)
			r.id.Destroy()
		}
	}
	p.reqs = nil
	p.id.Destroy()
	if err := p.ch.Close(); err != nil {
		return fabric.Errorf("fi_close", fabric.ErrBusy, err.Error())
	}
	return nil
}
