package sockpoll

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The waker signals a watched socket once per arming, and stops (its
// goroutine and descriptors gone) when the last socket leaves it.
func TestWakerSignalsOncePerArmAndStopsWhenIdle(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	a, err := Add(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := Add(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	w := a.w
	if b.w != w {
		t.Fatal("two wakers at once")
	}
	unix.Write(fds[1], []byte("x"))
	select {
	case <-a.C:
		t.Fatal("signalled before it was armed")
	case <-time.After(20 * time.Millisecond):
	}
	a.Arm(unix.EPOLLIN)
	select {
	case <-a.C:
	case <-time.After(5 * time.Second):
		t.Fatal("armed for a readable socket, no signal")
	}
	select {
	case <-a.C:
		t.Fatal("a second signal without arming again")
	case <-time.After(20 * time.Millisecond):
	}
	a.Close()
	select {
	case <-w.done:
		t.Fatal("the waker stopped while a socket was still watched")
	default:
	}
	b.Close()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the waker still runs with nothing to watch")
	}
	wakers.mu.Lock()
	defer wakers.mu.Unlock()
	if wakers.cur != nil || wakers.refs != 0 {
		t.Fatalf("waker state after the last close: %v, %d refs", wakers.cur, wakers.refs)
	}
}
