package tcp

import (
	"io"
	"net"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/sockpep"
)

type pep struct {
	info *fabric.Info
	ctx  any
	fabric.PassiveBinds
	*sockpep.Listener // the listener, and the requests not yet accepted or rejected
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
	p := &pep{info: info.Dup(), ctx: context}
	p.Listener = sockpep.New(p.info)
	return p, nil
}

// Listen binds the info's source address (port 0: any) and starts taking
// connection requests (fi_listen).
func (p *pep) Listen() error { return p.Listener.Listen(p.request) }

// request reads a connection's CONNREQ and raises FI_CONNREQ.
func (p *pep) request(c *net.TCPConn) {
	c.SetNoDelay(true)
	c.SetDeadline(time.Now().Add(cmTimeout))
	typ, data, err := readCM(c)
	c.SetDeadline(time.Time{})
	if err != nil || typ != cmConnReq {
		c.Close()
		return
	}
	r := &connReq{pep: p, conn: c, data: data}
	if !p.Hold(r, c) {
		return
	}
	info := p.info.Dup()
	info.SetProvider(provider{})
	info.Handle = r
	info.DestAddr = c.RemoteAddr().(*net.TCPAddr).AddrPort()
	info.SrcAddr = c.LocalAddr().(*net.TCPAddr).AddrPort()
	p.Queue().Write(fabric.EQEntry{Event: fabric.EventConnReq, FID: p, Info: info, Data: data})
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

// Reject answers a request with a NACK carrying param (fi_reject).
func (p *pep) Reject(handle any, param []byte) error {
	r, ok := handle.(*connReq)
	if !ok || r.pep != p || !p.Take(r) {
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
	p.Listener.Close()
	return nil
}
