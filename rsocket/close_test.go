package rsocket_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rsocket"
)

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// small is a Config whose ring fills after 4 KiB, so that a Write to a
// peer that does not read blocks soon.
var small = rsocket.Config{RecvBuffer: 4096, SendBuffer: 4096}

func TestCloseEndsBlockedCallsWithErrClosed(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		name string
		call func(c *rsocket.Conn) error
	}{
		{"Read", func(c *rsocket.Conn) error { _, err := c.Read(make([]byte, 10)); return err }},
		{"Write", func(c *rsocket.Conn) error { _, err := c.Write(make([]byte, 1<<20)); return err }}, // the peer never reads
		{"WriteTo", func(c *rsocket.Conn) error { _, err := c.WriteTo(io.Discard); return err }},
		{"ReadFrom to a peer that does not read", func(c *rsocket.Conn) error {
			_, err := c.ReadFrom(io.LimitReader(zeros{}, 1<<20))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 5 { // the race with Close's own messages was lost one time in two
				cli, _, _ := pair(t, small, small)
				errc := make(chan error, 1)
				go func() { errc <- tc.call(cli) }()
				time.Sleep(50 * time.Millisecond)
				cli.Close()
				select {
				case err := <-errc:
					if !errors.Is(err, net.ErrClosed) {
						t.Fatalf("%s blocked through Close: %v, want net.ErrClosed", tc.name, err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("Close left a %s blocked", tc.name)
				}
			}
		})
	}
}

func TestConcurrentClosesCloseOnce(t *testing.T) {
	noLeaks(t)
	cli, _, _ := pair(t, rsocket.Config{}, rsocket.Config{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = cli.Close() }()
	}
	wg.Wait()
	if errors.Is(errs[0], net.ErrClosed) == errors.Is(errs[1], net.ErrClosed) {
		t.Errorf("two Closes returned %v and %v; want one net.ErrClosed", errs[0], errs[1])
	}
}

func TestSetDeadlineAfterCloseFails(t *testing.T) {
	noLeaks(t)
	cli, _, _ := pair(t, rsocket.Config{}, rsocket.Config{})
	cli.SetReadDeadline(time.Now().Add(time.Hour)) // a timer running at Close
	cli.Close()
	done := make(chan error, 1)
	go func() { done <- cli.SetDeadline(time.Now().Add(time.Minute)) }()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("SetDeadline after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetDeadline after Close hangs")
	}
}

func TestCloseWriteDoesNotWaitForABlockedWrite(t *testing.T) {
	noLeaks(t)
	cli, _, _ := pair(t, small, small)
	werr := make(chan error, 1)
	go func() { _, err := cli.Write(make([]byte, 1<<20)); werr <- err }() // the peer never reads
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- cli.CloseWrite() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("CloseWrite: %v", err)
		}
	case <-time.After(5 * time.Second):
		cli.SetWriteDeadline(time.Now())
		t.Fatal("CloseWrite waits for a blocked Write")
	}
	if err := <-werr; !errors.Is(err, syscall.EPIPE) {
		t.Errorf("the blocked Write ended with %v, want EPIPE", err)
	}
}

// TestCloseRightAfterWritesLosesNothing: the peer's disconnect may come
// before the completions of its last messages are taken; they are still
// read before io.EOF.
func TestCloseRightAfterWritesLosesNothing(t *testing.T) {
	noLeaks(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				cli, srv, _ := pair(t, rsocket.Config{}, rsocket.Config{})
				const msgs = 1000
				go func() {
					for range msgs {
						if _, err := cli.Write([]byte{'x'}); err != nil {
							t.Error(err)
							return
						}
					}
					cli.Close()
				}()
				got, err := io.ReadAll(srv)
				if err != nil || len(got) != msgs {
					t.Errorf("run %d.%d: read %d of %d bytes, %v", g, i, len(got), msgs, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestCloseDoesNotWaitForReadFromsSource: Close returns while ReadFrom
// waits in its reader (a proxy's other side), and ReadFrom fails with
// net.ErrClosed once the reader returns.
func TestCloseDoesNotWaitForReadFromsSource(t *testing.T) {
	noLeaks(t)
	cli, _, _ := pair(t, rsocket.Config{}, rsocket.Config{})
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() { _, err := cli.ReadFrom(pr); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- cli.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		pw.Close()
		t.Fatal("Close waits for ReadFrom's reader")
	}
	pw.Write([]byte("late")) // the reader returns
	pw.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadFrom after Close: %v, want net.ErrClosed", err)
	}
}

// A Read that waits while the peer's data and Close come at once ends with
// net.ErrClosed and touches none of the memory Close frees (it read the
// freed receive ring, and crashed, when the data woke it after Close).
func TestCloseDuringAReadThatDataWakes(t *testing.T) {
	noLeaks(t)
	for range 30 {
		cli, srv, _ := pair(t, small, small)
		errc := make(chan error, 1)
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := cli.Read(buf); err != nil {
					errc <- err
					return
				}
			}
		}()
		go func() {
			for {
				if _, err := srv.Write(make([]byte, 64)); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Millisecond)
		cli.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Read through Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close left a Read blocked")
		}
		srv.Close()
	}
}
