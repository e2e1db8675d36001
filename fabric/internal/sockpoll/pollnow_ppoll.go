//go:build linux && !amd64 && !386

package sockpoll

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pollNow polls one descriptor without waiting, with ppoll: this
// architecture has no poll(2).
func pollNow(fd *unix.PollFd) (uintptr, syscall.Errno) {
	var ts unix.Timespec
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(fd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return n, errno
}
