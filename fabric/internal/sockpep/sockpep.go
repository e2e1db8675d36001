// Package sockpep is what the passive endpoints of the socket providers
// (tcp, sockets) share whatever their protocol: a TCP listener on the
// entry's source address, a goroutine per incoming connection to read its
// request, and the requests not yet accepted or rejected, which Close
// ends.
package sockpep

import (
	"net"
	"net/netip"
	"sync"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/sockpoll"
)

// Listener is a passive endpoint's listener and its pending requests.
type Listener struct {
	info *fabric.Info

	mu      sync.Mutex
	ln      *net.TCPListener
	closed  bool
	pending map[any]net.Conn // the requests not yet answered, by the provider's handle
	wg      sync.WaitGroup
}

// New returns the listener of a passive endpoint opened with info.
func New(info *fabric.Info) *Listener {
	return &Listener{info: info, pending: map[any]net.Conn{}}
}

// Listen binds the entry's source address (port 0: any) and hands each
// connection made to it to read, on a goroutine of its own, which reads
// the request and holds it (Hold) or closes the connection (fi_listen).
func (l *Listener) Listen(read func(c *net.TCPConn)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(fabric.ListenAddr(l.info)))
	if err != nil {
		return fabric.Errorf("fi_listen", sockpoll.Errno(err, fabric.ErrAddrInUse), err.Error())
	}
	l.ln = ln
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				read(c)
			}()
		}
	}()
	return nil
}

// Hold keeps a request, named by its handle, until Take or Close; false
// (the connection closed) if the endpoint is closed.
func (l *Listener) Hold(handle any, c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return false
	}
	l.pending[handle] = c
	return true
}

// Take removes a pending request, reporting whether it was one: a
// request is accepted or rejected once.
func (l *Listener) Take(handle any) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[handle]; !ok {
		return false
	}
	delete(l.pending, handle)
	return true
}

// Name returns the listening address (fi_getname), or before Listen the
// entry's source address.
func (l *Listener) Name() (netip.AddrPort, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return l.info.SrcAddr, nil
	}
	return l.ln.Addr().(*net.TCPAddr).AddrPort(), nil
}

// Close stops listening, closes the pending requests' connections and
// waits for the goroutines.
func (l *Listener) Close() {
	l.mu.Lock()
	l.closed = true
	ln, pending := l.ln, l.pending
	l.pending = map[any]net.Conn{}
	l.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range pending {
		c.Close()
	}
	l.wg.Wait()
}
