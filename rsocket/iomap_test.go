package rsocket_test

import (
	"bytes"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rsocket"
)

// ioWriteAndFlush writes p at off with IOWrite, then a one-byte Write
// the peer reads: RC ordering puts the RDMA WRITEs in the peer's buffer
// before that byte.
func ioWriteAndFlush(t *testing.T, w, r *rsocket.Conn, p []byte, off int64) {
	t.Helper()
	if n, err := w.IOWrite(p, off); n != len(p) || err != nil {
		t.Fatalf("IOWrite(%d bytes at %d) = %d, %v", len(p), off, n, err)
	}
	if _, err := w.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		t.Fatal(err)
	}
}

func TestIOWriteLandsInTheMappedBufferAtItsOffset(t *testing.T) {
	defer noLeaks(t)
	for _, tc := range []struct {
		name         string
		size         int
		mapAt, write int64 // the mapping's offset, and where the write starts
		sbuf, inline int   // the writer's send buffer and inline size
	}{
		{name: "one byte inline", size: 1, mapAt: 0, write: 0},
		{name: "64 bytes at offset 0", size: 64, mapAt: 0, write: 0},
		{name: "4 KiB not inline", size: 4096, mapAt: 0, write: 0, inline: -1},
		{name: "200 KiB through a 16 KiB send buffer", size: 200 << 10, mapAt: 0, write: 0, sbuf: 16 << 10},
		{name: "odd size past a high offset", size: 70001, mapAt: 1 << 40, write: 1<<40 + 3, sbuf: 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv, _ := pair(t, rsocket.Config{SendBuffer: tc.sbuf, InlineSize: tc.inline, IOMapSize: 1}, rsocket.Config{IOMapSize: 1})
			buf := make([]byte, tc.size+int(tc.write-tc.mapAt))
			off, err := srv.IOMap(buf, rsocket.ProtWrite, tc.mapAt)
			if err != nil || off != tc.mapAt {
				t.Fatalf("IOMap = %d, %v; want %d", off, err, tc.mapAt)
			}
			// A Write after IOMap reaches the peer after the entry.
			if _, err := srv.Write([]byte{0}); err != nil {
				t.Fatal(err)
			}
			var b [1]byte
			if _, err := io.ReadFull(cli, b[:]); err != nil {
				t.Fatal(err)
			}
			p := make([]byte, tc.size)
			for i := range p {
				p[i] = byte(i*7 + 1)
			}
			ioWriteAndFlush(t, cli, srv, p, tc.write)
			if skip := int(tc.write - tc.mapAt); !bytes.Equal(buf[skip:], p) || bytes.Count(buf[:skip], []byte{0}) != skip {
				t.Fatalf("the mapped buffer differs from what was written")
			}
			if err := srv.IOUnmap(buf); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestIOMapErrorsAreClear(t *testing.T) {
	defer noLeaks(t)
	// The client keeps a one-entry iomap; the server keeps none.
	cli, srv, _ := pair(t, rsocket.Config{IOMapSize: 1}, rsocket.Config{})
	buf := make([]byte, 100)
	if _, err := cli.IOMap(buf, rsocket.ProtWrite, 0); !errors.Is(err, rsocket.ErrNoIOMap) {
		t.Errorf("IOMap toward a peer with no iomap: %v, want ErrNoIOMap", err)
	}
	if _, err := srv.IOMap(buf, 0x4, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IOMap with PROT_EXEC: %v, want EINVAL", err)
	}
	if _, err := srv.IOMap(nil, rsocket.ProtWrite, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IOMap of nothing: %v, want EINVAL", err)
	}
	if _, err := srv.IOMap(buf, rsocket.ProtWrite, -2); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IOMap at -2: %v, want EINVAL", err)
	}
	if n, err := srv.IOWrite([]byte("x"), 0); n != 0 || !errors.Is(err, rsocket.ErrNotMapped) {
		t.Errorf("IOWrite before any mapping = %d, %v; want 0, ErrNotMapped", n, err)
	}
	if err := srv.IOUnmap(buf); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IOUnmap of a buffer never mapped: %v, want EINVAL", err)
	}

	off, err := cli.IOMap(buf, rsocket.ProtNone, -1)
	if err != nil || off <= 0 {
		t.Fatalf("a local mapping at the buffer's address: %d, %v", off, err)
	}
	if err := cli.IOUnmap(buf); err != nil {
		t.Fatal(err)
	}

	// The server maps into the client's iomap; the client writes.
	cli2, srv2 := srv, cli
	if _, err := cli2.IOMap(buf, rsocket.ProtWrite, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := cli2.IOMap(make([]byte, 5), rsocket.ProtWrite, 0); !errors.Is(err, rsocket.ErrNoIOMap) {
		t.Errorf("a second IOMap into a one-entry iomap: %v, want ErrNoIOMap", err)
	}
	if _, err := cli2.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(srv2, b[:]); err != nil {
		t.Fatal(err)
	}
	if n, err := srv2.IOWrite([]byte("x"), 999); n != 0 || !errors.Is(err, rsocket.ErrNotMapped) {
		t.Errorf("IOWrite just before the mapping = %d, %v; want 0, ErrNotMapped", n, err)
	}
	if n, err := srv2.IOWrite(make([]byte, 150), 1050); n != 50 || !errors.Is(err, rsocket.ErrNotMapped) {
		t.Errorf("IOWrite running past the mapping's end = %d, %v; want 50, ErrNotMapped", n, err)
	}
	if _, err := srv2.IOWrite([]byte("x"), -1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IOWrite at -1: %v, want EINVAL", err)
	}
	// A message after the writes tells that they landed: unmapping
	// before would fail the peer's writes, and the connection.
	if _, err := srv2.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(cli2, b[:]); err != nil {
		t.Fatal(err)
	}
	// Unmapping frees the entry for the next IOMap.
	if err := cli2.IOUnmap(buf); err != nil {
		t.Fatal(err)
	}
	if err := cli2.IOUnmap(buf); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a second IOUnmap: %v, want EINVAL", err)
	}
	if _, err := cli2.IOMap(buf[:10], rsocket.ProtWrite, 0); err != nil {
		t.Errorf("IOMap after IOUnmap: %v", err)
	}
	var zero *rsocket.Conn
	if _, err := zero.IOWrite(nil, 0); !errors.Is(err, syscall.EBADF) {
		t.Errorf("IOWrite on a nil Conn: %v", err)
	}
	if _, err := zero.IOMap(buf, 0, 0); !errors.Is(err, syscall.EBADF) {
		t.Errorf("IOMap on a nil Conn: %v", err)
	}
	if err := zero.IOUnmap(buf); !errors.Is(err, syscall.EBADF) {
		t.Errorf("IOUnmap on a nil Conn: %v", err)
	}
}

// TestManyIOMapsDoNotUseUpCredits maps and unmaps many more times than
// the peer's receive queue holds: each mapping's message takes a credit,
// which the peer gives back as it takes its completions (here, in a
// Read waiting for data, as riostream's peer waits), so mappings and
// writes go on. The peer's iomap has more entries than there are
// mappings, and entries are taken in turn, so none is written twice:
// rsockets does not tell when the peer has read an entry, and one written
// again might still be being read.
func TestManyIOMapsDoNotUseUpCredits(t *testing.T) {
	defer noLeaks(t)
	cli, srv, _ := pair(t, rsocket.Config{QueueSize: 16, IOMapSize: 128}, rsocket.Config{QueueSize: 16})
	srv.SetWriteDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(cli, b[:])
		read <- err
	}()
	buf := make([]byte, 64)
	for i := range 100 {
		if _, err := srv.IOMap(buf, rsocket.ProtWrite, 0); err != nil {
			t.Fatalf("IOMap %d: %v", i, err)
		}
		if err := srv.IOUnmap(buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil || b[0] != 'x' {
		t.Fatalf("read %q, %v", b[:], err)
	}
}
