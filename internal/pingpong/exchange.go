package pingpong

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// dest is one QP's address (struct pingpong_dest).
type dest struct {
	lid, qpn, psn uint32
	gid           verbs.GID
}

// exchangeLen is the size of one exchange string with its NUL:
// sizeof "0000:000000:000000:00000000000000000000000000000000".
const exchangeLen = 4 + 1 + 6 + 1 + 6 + 1 + 32 + 1

// exchangeTimeout bounds the TCP exchange once connected.
const exchangeTimeout = 60 * time.Second

func (d *dest) marshal() []byte {
	b := make([]byte, 0, exchangeLen)
	b = fmt.Appendf(b, "%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, d.gid.Hex())
	return append(b, 0)
}

// parseDest parses the peer's exchange string, strictly: four fields, hex.
func parseDest(b []byte) (dest, error) {
	var d dest
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	f := bytes.Split(b, []byte(":"))
	if len(f) != 4 {
		return d, fmt.Errorf("pingpong: malformed address %q: want LID:QPN:PSN:GID", b)
	}
	var v [3]uint64
	for i := 0; i < 3; i++ {
		n, err := strconv.ParseUint(string(f[i]), 16, 32)
		if err != nil {
			return d, fmt.Errorf("pingpong: malformed address %q: %v", b, err)
		}
		v[i] = n
	}
	if v[1] > 0xffffff || v[2] > 0xffffff || v[0] > 0xffff {
		return d, fmt.Errorf("pingpong: malformed address %q: field out of range", b)
	}
	gid, err := verbs.ParseGIDHex(string(f[3]))
	if err != nil {
		return d, fmt.Errorf("pingpong: malformed address %q: %v", b, err)
	}
	d.lid, d.qpn, d.psn, d.gid = uint32(v[0]), uint32(v[1]), uint32(v[2]), gid
	return d, nil
}

// marshalDests returns the n exchange strings for my, padded with all-zero
// addresses as ibv_srq_pingpong pads its MAX_QP array.
func marshalDests(my []dest, n int) []byte {
	b := make([]byte, 0, n*exchangeLen)
	for i := 0; i < n; i++ {
		var d dest
		if i < len(my) {
			d = my[i]
		}
		b = append(b, d.marshal()...)
	}
	return b
}

// parseDests parses the peer's n exchange strings and returns the first
// want. A peer using fewer QPs than we do sends zero QPNs where we expect
// addresses; one using more sends addresses past them: either is an error
// (the C programs would connect to QP 0 and hang).
func parseDests(msg []byte, want int) ([]dest, error) {
	n := len(msg) / exchangeLen
	rem := make([]dest, want)
	for i := 0; i < n; i++ {
		d, err := parseDest(msg[i*exchangeLen : (i+1)*exchangeLen])
		if i >= want {
			if err == nil && d.qpn != 0 {
				return nil, fmt.Errorf("the peer uses more QPs than our %d: address %d is QPN 0x%06x (use the same -q on both sides)", want, i, d.qpn)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if d.qpn == 0 {
			if want > 1 {
				return nil, fmt.Errorf("the peer uses fewer QPs than our %d: its address %d has QPN 0 (use the same -q on both sides)", want, i)
			}
			return nil, fmt.Errorf("the peer's address has QPN 0")
		}
		rem[i] = d
	}
	return rem, nil
}

// clientExchange is pp_client_exch_dest: send our addresses, read the
// server's, answer "done".
func clientExchange(ctx context.Context, o *Options, my []dest) ([]dest, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(o.Server, strconv.Itoa(o.Port)))
	if err != nil {
		return nil, fmt.Errorf("couldn't connect to %s:%d: %w", o.Server, o.Port, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetDeadline(time.Now().Add(exchangeTimeout))
	n := o.exchangeCount()
	if _, err := conn.Write(marshalDests(my, n)); err != nil {
		return nil, fmt.Errorf("couldn't send local address: %w", err)
	}
	msg := make([]byte, n*exchangeLen)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return nil, fmt.Errorf("couldn't read remote address: %w", err)
	}
	rem, err := parseDests(msg, len(my))
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte("done\x00")); err != nil {
		return nil, fmt.Errorf("couldn't write done: %w", err)
	}
	return rem, nil
}

// serverExchange is pp_server_exch_dest: accept one client, read its
// addresses, connect our QPs to them, send ours and wait for "done".
func serverExchange(ctx context.Context, o *Options, my []dest, connect func([]dest) error) ([]dest, error) {
	ln := o.Listener
	if ln == nil {
		var lc net.ListenConfig
		var err error
		ln, err = lc.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(o.Port)))
		if err != nil {
			return nil, fmt.Errorf("couldn't listen to port %d: %w", o.Port, err)
		}
		if o.Port == 0 && o.Notice != nil {
			// The C programs bind the port getaddrinfo's "0" gives, an
			// ephemeral one, and never say which: say it.
			fmt.Fprintf(o.Notice, "listening on port %d\n", ln.Addr().(*net.TCPAddr).Port)
		}
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	stop = context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetDeadline(time.Now().Add(exchangeTimeout))
	n := o.exchangeCount()
	msg := make([]byte, n*exchangeLen)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return nil, fmt.Errorf("couldn't read remote address: %w", err)
	}
	rem, err := parseDests(msg, len(my))
	if err != nil {
		return nil, err
	}
	if err := connect(rem); err != nil {
		return nil, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	if _, err := conn.Write(marshalDests(my, n)); err != nil {
		return nil, fmt.Errorf("couldn't send local address: %w", err)
	}
	// The client answers "done"; its closing the connection ends it too.
	io.ReadAtLeast(conn, msg[:exchangeLen], 1)
	return rem, nil
}
