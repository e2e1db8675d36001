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

func TestReadyTellsWhetherAReadOrWriteWouldNotBlock(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if Ready(fds[0], unix.POLLIN) {
		t.Error("an empty socket is readable")
	}
	if !Ready(fds[0], unix.POLLOUT) {
		t.Error("a socket with room is not writable")
	}
	if _, err := unix.Write(fds[1], []byte("x")); err != nil {
		t.Fatal(err)
	}
	if !Ready(fds[0], unix.POLLIN) {
		t.Error("a socket with a byte waiting is not readable")
	}
	unix.Close(fds[1])
	var b [2]byte
	unix.Read(fds[0], b[:])
	if !Ready(fds[0], unix.POLLIN|unix.POLLRDHUP) {
		t.Error("a socket whose peer closed is not ready (a read would see the end)")
	}
}
