package sockets

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/sockpep"
	"github.com/rdmago/rdmago/fabric/internal/sockpoll"
)

// Connection management of FI_EP_MSG endpoints (see wire.go): a request
// to the passive endpoint's listener, answered with ACCEPT or REJECT, and
// SHUTDOWN from either side later, on a TCP connection of its own beside
// the data connection.

type cmState int

const (
	cmIdle cmState = iota
	cmRequested
	cmConnected
	cmDisconnected
)

// msgCM is an FI_EP_MSG endpoint's connection management state. Guarded
// by the endpoint's mu.
type msgCM struct {
	state cmState
	nc    net.Conn       // the connection management connection
	peer  netip.AddrPort // the peer's data listener
	req   *connReq       // the request a passive side's endpoint was opened on
}

// cmTimeout bounds a connection management exchange.
const cmTimeout = 15 * time.Second // SOCK_CM_DEF_TIMEOUT

// Connect sends a connection request to the passive endpoint at addr
// (fi_connect); FI_CONNECTED follows its ACCEPT, an error entry
// (FI_ECONNREFUSED, with its private data) its REJECT.
func (e *ep) Connect(addr netip.AddrPort, param []byte) error {
	const op = "fi_connect"
	if e.typ != fabric.EPMsg {
		return fabric.Errorf(op, fabric.ErrNoSys, "only FI_EP_MSG endpoints connect")
	}
	if len(param) > maxCMData {
		return fabric.Errorf(op, fabric.ErrInvalid, "private data over 256 bytes")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return fabric.Errorf(op, fabric.ErrBadFD, "endpoint closed")
	case e.EQ == nil:
		return fabric.Errorf(op, fabric.ErrNoEQ, "bind an EQ first")
	case e.cm.req != nil || e.cm.state != cmIdle:
		return fabric.Errorf(op, fabric.ErrOpBadState, "the endpoint has connected already, or was opened on a request")
	}
	if err := e.listen(); err != nil {
		return fabric.Errorf(op, sockpoll.Errno(err, fabric.ErrAddrInUse), err.Error())
	}
	req := make([]byte, connReqLen+len(param))
	connHeader{typ: connRequest, port: e.self.Port(), dataSz: uint16(len(param))}.put(req)
	putAddr(req[connHdrLen:], e.self)
	binary.LittleEndian.PutUint64(req[connHdrLen+addrLen:], uint64(e.info.Caps))
	copy(req[connReqLen:], param)
	e.cm.state = cmRequested
	e.wg.Add(1)
	go e.request(addr, req)
	return nil
}

// request makes the connection management connection, sends the request
// and waits for the answer.
func (e *ep) request(addr netip.AddrPort, req []byte) {
	defer e.wg.Done()
	ctx, cancel := context.WithTimeout(e.closing, cmTimeout)
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr.String())
	cancel()
	if err != nil {
		e.refused(nil)
		return
	}
	nc.SetDeadline(time.Now().Add(cmTimeout))
	stop := context.AfterFunc(e.closing, func() { nc.Close() })
	defer stop()
	if _, err := nc.Write(req); err != nil {
		nc.Close()
		e.refused(nil)
		return
	}
	h, data, err := readConnMsg(nc)
	nc.SetDeadline(time.Time{})
	if err != nil || h.typ != connAccept {
		nc.Close()
		e.refused(data)
		return
	}
	e.mu.Lock()
	if e.closed || e.cm.state != cmRequested {
		e.mu.Unlock()
		nc.Close()
		return
	}
	e.cm.state, e.cm.nc = cmConnected, nc
	e.cm.peer = netip.AddrPortFrom(addr.Addr(), h.port)
	e.enabled = true
	eq := e.EQ
	e.mu.Unlock()
	eq.Write(fabric.EQEntry{Event: fabric.EventConnected, FID: e.FID(), Data: data})
	e.watchCM(nc)
}

// refused reports a request the peer rejected (with its private data) or
// that found no passive endpoint.
func (e *ep) refused(data []byte) {
	e.mu.Lock()
	if e.closed || e.cm.state != cmRequested {
		e.mu.Unlock()
		return
	}
	e.cm.state = cmDisconnected
	eq := e.EQ
	e.mu.Unlock()
	eq.WriteErr(fabric.EQErrEntry{FID: e.FID(), Err: fabric.ErrConnRefused, ErrData: data})
}

// readConnMsg reads a connection management header and its private data.
func readConnMsg(nc net.Conn) (connHeader, []byte, error) {
	var b [connHdrLen]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return connHeader{}, nil, err
	}
	h, err := parseConnHeader(b[:])
	if err != nil {
		return h, nil, err
	}
	data := make([]byte, h.dataSz)
	if _, err := io.ReadFull(nc, data); err != nil {
		return h, nil, err
	}
	return h, data, nil
}

// watchCM waits on the connection management connection for the peer's
// SHUTDOWN (or its end), which it reports as FI_SHUTDOWN.
func (e *ep) watchCM(nc net.Conn) {
	for {
		h, _, err := readConnMsg(nc)
		if err != nil || h.typ == connShutdown {
			e.shutdown(false)
			return
		}
	}
}

// Accept accepts the request the endpoint was opened on (fi_accept): it
// starts the data listener, answers ACCEPT with its port and the private
// data, and raises FI_CONNECTED.
func (e *ep) Accept(param []byte) error {
	const op = "fi_accept"
	if len(param) > maxCMData {
		return fabric.Errorf(op, fabric.ErrInvalid, "private data over 256 bytes")
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return fabric.Errorf(op, fabric.ErrBadFD, "endpoint closed")
	case e.typ != fabric.EPMsg || e.cm.req == nil || e.cm.state != cmIdle:
		e.mu.Unlock()
		return fabric.Errorf(op, fabric.ErrInvalid, "the endpoint was not opened on a connection request, or answered it")
	case e.EQ == nil:
		e.mu.Unlock()
		return fabric.Errorf(op, fabric.ErrNoEQ, "bind an EQ first")
	}
	if err := e.listen(); err != nil {
		e.mu.Unlock()
		return fabric.Errorf(op, sockpoll.Errno(err, fabric.ErrAddrInUse), err.Error())
	}
	r := e.cm.req
	reply := make([]byte, connHdrLen+len(param))
	connHeader{typ: connAccept, port: e.self.Port(), dataSz: uint16(len(param))}.put(reply)
	copy(reply[connHdrLen:], param)
	r.nc.SetWriteDeadline(time.Now().Add(cmTimeout))
	_, err := r.nc.Write(reply)
	r.nc.SetWriteDeadline(time.Time{})
	if err != nil {
		e.mu.Unlock()
		return fabric.Errorf(op, fabric.ErrConnReset, err.Error())
	}
	e.cm.state, e.cm.nc, e.cm.peer = cmConnected, r.nc, r.peer
	e.enabled = true
	eq := e.EQ
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.watchCM(r.nc)
	}()
	e.mu.Unlock()
	eq.Write(fabric.EQEntry{Event: fabric.EventConnected, FID: e.FID()})
	return nil
}

// Shutdown ends the connection (fi_shutdown): SHUTDOWN goes to the peer,
// and FI_SHUTDOWN to both sides' EQs, as C's.
func (e *ep) Shutdown() error {
	if e.typ != fabric.EPMsg {
		return fabric.Errorf("fi_shutdown", fabric.ErrNoSys, "only FI_EP_MSG endpoints connect")
	}
	e.shutdown(true)
	return nil
}

// shutdown ends a connected endpoint's connection, telling the peer if
// send, and raises FI_SHUTDOWN.
func (e *ep) shutdown(send bool) {
	e.mu.Lock()
	if e.cm.state != cmConnected || e.closed {
		e.mu.Unlock()
		return
	}
	e.cm.state = cmDisconnected
	nc, eq := e.cm.nc, e.EQ
	e.mu.Unlock()
	if send {
		var b [connHdrLen]byte
		connHeader{typ: connShutdown}.put(b[:])
		nc.SetWriteDeadline(time.Now().Add(cmTimeout))
		nc.Write(b[:])
		nc.Close()
	}
	eq.Write(fabric.EQEntry{Event: fabric.EventShutdown, FID: e.FID()})
}

// Peer returns the connected peer's data address (fi_getpeer).
func (e *ep) Peer() (netip.AddrPort, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.typ != fabric.EPMsg || e.cm.state != cmConnected && e.cm.state != cmDisconnected {
		return netip.AddrPort{}, fabric.Errorf("fi_getpeer", fabric.ErrNotConn, "not connected")
	}
	return e.cm.peer, nil
}

// closeCM closes the connection management connection, and the request
// an endpoint was opened on and did not answer.
func (e *ep) closeCM() {
	if e.cm == nil {
		return
	}
	e.mu.Lock()
	nc, r := e.cm.nc, e.cm.req
	e.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
	if r != nil {
		r.nc.Close()
	}
}

// ---- Passive endpoint ----

type pep struct {
	info *fabric.Info
	ctx  any
	fabric.PassiveBinds
	*sockpep.Listener // the listener, and the requests not yet accepted or rejected
}

// connReq is a connection request: its connection, the requester's data
// listener and private data. It is the Handle of FI_CONNREQ's info.
type connReq struct {
	pep  *pep
	nc   net.Conn
	peer netip.AddrPort
}

func (provider) PassiveEndpoint(f *fabric.Fabric, info *fabric.Info, context any) (fabric.PassiveEndpointDriver, error) {
	if info == nil || info.EPAttr == nil || info.EPAttr.Type != fabric.EPMsg {
		return nil, fabric.Errorf("fi_passive_ep", fabric.ErrInvalid, "the sockets provider's passive endpoints are FI_EP_MSG")
	}
	p := &pep{info: info.Dup(), ctx: context}
	p.Listener = sockpep.New(p.info)
	return p, nil
}

// Listen listens on the entry's source address (port 0: any) for
// connection requests (fi_listen).
func (p *pep) Listen() error { return p.Listener.Listen(p.request) }

// request reads a connection's request and raises FI_CONNREQ.
func (p *pep) request(nc *net.TCPConn) {
	nc.SetDeadline(time.Now().Add(cmTimeout))
	var b [connReqLen]byte
	_, err := io.ReadFull(nc, b[:])
	var h connHeader
	if err == nil {
		h, err = parseConnHeader(b[:])
	}
	var peer netip.AddrPort
	if err == nil && h.typ != connRequest {
		err = errWire
	}
	if err == nil {
		peer, err = parseAddr(b[connHdrLen:])
	}
	data := make([]byte, h.dataSz)
	if err == nil {
		_, err = io.ReadFull(nc, data)
	}
	nc.SetDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return
	}
	// The requester listens where its header says (as C's, which takes
	// the port from the header).
	peer = netip.AddrPortFrom(peer.Addr(), h.port)
	r := &connReq{pep: p, nc: nc, peer: peer}
	if !p.Hold(r, nc) {
		return
	}
	info := p.info.Dup()
	info.SetProvider(provider{})
	info.Handle = r
	info.DestAddr = peer
	info.SrcAddr = netip.AddrPortFrom(nc.LocalAddr().(*net.TCPAddr).AddrPort().Addr(), 0)
	p.Queue().Write(fabric.EQEntry{Event: fabric.EventConnReq, FID: p, Info: info, Data: data})
}

// Reject refuses a request with REJECT and private data (fi_reject).
func (p *pep) Reject(handle any, param []byte) error {
	r, ok := handle.(*connReq)
	if !ok || r.pep != p || !p.Take(r) {
		return fabric.Errorf("fi_reject", fabric.ErrInvalid, "not a pending request of this endpoint")
	}
	if len(param) > maxCMData {
		r.nc.Close()
		return fabric.Errorf("fi_reject", fabric.ErrInvalid, "private data over 256 bytes")
	}
	b := make([]byte, connHdrLen+len(param))
	connHeader{typ: connReject, dataSz: uint16(len(param))}.put(b)
	copy(b[connHdrLen:], param)
	r.nc.SetWriteDeadline(time.Now().Add(cmTimeout))
	_, err := r.nc.Write(b)
	r.nc.Close()
	if err != nil {
		return fabric.Errorf("fi_reject", fabric.ErrConnReset, err.Error())
	}
	return nil
}

// Close stops listening and closes the requests not answered.
func (p *pep) Close() error {
	p.Listener.Close()
	return nil
}
