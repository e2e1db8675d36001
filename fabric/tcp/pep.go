package tcp

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/sockpoll"
)

type pep struct {
	info *fabric.Info
	ctx  any

	mu sync.Mutex
	fabric.PassiveBinds
	ln     *net.TCPListener
	closed bool
	wg     sync.WaitGroup
	conns  map[*connReq]bool // requests not yet accepted or rejected
}

// connReq is a connection request: the socket and what its CONNREQ
// carried. It is the Handle of the FI_CONNREQ event's info.
type connReq struct {
	pep  *pep
	conn *net.TCPConn
	data []byte
}

func (provider) PassiveEndpoint(f *fabric.Fabric, info *fabric.Info, context any) (fabric.PassiveEndpointDriver, error) {
	if info == nil || info.EPAttr == nil || info.EPAttr.Type != fabric.EPMsg {
		return nil, fabric.Errorf("fi_passive_ep", fabric.ErrInvalid, "the tcp provider's passive endpoints are FI_EP_MSG")
	}
	return &pep{info: info.Dup(), ctx: context, conns: map[*connReq]bool{}}, nil
}

// Listen binds the info's source address (port 0: any) and starts taking
// connection requests.
func (p *pep) Listen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	src := fabric.ListenAddr(p.info)
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(src))
	if err != nil {
		return fabric.Errorf("fi_listen", sockpoll.Errno(err, fabric.ErrAddrInUse), err.Error())
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// accept takes each connection, reads its CONNREQ and raises FI_CONNREQ.
func (p *pep) accept(ln *net.TCPListener) {
	defer p.wg.Done()
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			c.SetNoDelay(true)
			c.SetDeadline(time.Now().Add(cmTimeout))
			typ, data, err := readCM(c)
			c.SetDeadline(time.Time{})
			if err != nil || typ != cmConnReq {
				c.Close()
				return
			}
			r := &connReq{pep: p, conn: c, data: data}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				c.Close()
				return
			}
			p.conns[r] = true
			p.mu.Unlock()
			info := p.info.Dup()
			info.SetProvider(provider{})
			info.Handle = r
			info.DestAddr = c.RemoteAddr().(*net.TCPAddr).AddrPort()
			info.SrcAddr = c.LocalAddr().(*net.TCPAddr).AddrPort()
			p.Queue().Write(fabric.EQEntry{Event: fabric.EventConnReq, FID: p, Info: info, Data: data})
		}()
	}
}

// readCM reads one connection management message.
func readCM(c net.Conn) (uint8, []byte, error) {
	var h [cmHeaderLen]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, nil, err
	}
	typ, n, err := parseCMHeader(h[:])
	if err != nil {
		return 0, nil, err
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(c, data); err != nil {
		return 0, nil, err
	}
	return typ, data, nil
}

func (p *pep) Name() (netip.AddrPort, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return p.info.SrcAddr, nil
	}
	return p.ln.Addr().(*net.TCPAddr).AddrPort(), nil
}

// take removes a request from the pending ones.
func (p *pep) take(r *connReq) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.conns[r] {
		return false
	}
	delete(p.conns, r)
	return true
}

// Reject answers a request with a NACK carrying param (fi_reject).
func (p *pep) Reject(handle any, param []byte) error {
	r, ok := handle.(*connReq)
	if !ok || r.pep != p || !p.take(r) {
		return fabric.Errorf("fi_reject", fabric.ErrInvalid, "not a pending request of this endpoint")
	}
	if len(param) > maxCMData {
		return fabric.Errorf("fi_reject", fabric.ErrInvalid, "private data over 256 bytes")
	}
	r.conn.SetWriteDeadline(time.Now().Add(cmTimeout))
	_, err := r.conn.Write(marshalCM(cmNack, param))
	r.conn.Close()
	if err != nil {
		return fabric.Errorf("fi_reject", fabric.ErrConnReset, err.Error())
	}
	return nil
}

// Close is called once (fabric.PassiveEndpointDriver).
func (p *pep) Close() error {
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	reqs := p.conns
	p.conns = map[*connReq]bool{}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for r := range reqs {
		r.conn.Close()
	}
	p.wg.Wait()
	return nil
}
