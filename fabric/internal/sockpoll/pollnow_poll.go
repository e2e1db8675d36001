//go:build linux && (amd64 || 386)

package sockpoll

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pollNow polls one descriptor without waiting. poll(2) takes its
// timeout as a number; ppoll's timespec would be copied in on every call
// of the spin, a few percent of a small message's round trip.
func pollNow(fd *unix.PollFd) (uintptr, syscall.Errno) {
	n, _, errno := unix.RawSyscall(unix.SYS_POLL, uintptr(unsafe.Pointer(fd)), 1, 0)
	return n, errno
}
