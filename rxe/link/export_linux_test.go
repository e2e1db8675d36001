package link

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// Hooks for the black-box tests to see what the kernel did.

// GROEnabled reports whether u reads coalesced datagrams (UDP_GRO).
func GROEnabled(u *UDP) bool { return u.receiver.gro }

// GSOEnabled reports whether u sends runs of packets as UDP GSO sends.
func GSOEnabled(u *UDP) bool {
	u.sendMu.Lock()
	defer u.sendMu.Unlock()
	return u.sender.gso
}

// DatagramsRead returns how many datagrams u has read with GRO on.
func DatagramsRead(u *UDP) uint64 {
	u.recvMu.Lock()
	defer u.recvMu.Unlock()
	return u.receiver.datagramsRead
}

// PushBack makes u's socket refuse messages (EAGAIN) but for those room
// lets through: room is called before each system call with the messages
// it would send, and returns how many may go.
func PushBack(u *UDP, room func(n int) int) {
	fake := func(fd uintptr, hdrs *mmsghdr, n int) (int, syscall.Errno) {
		if k := room(n); k < n {
			if k == 0 {
				return 0, unix.EAGAIN
			}
			n = k
		}
		return sendmmsg(fd, hdrs, n)
	}
	u.sendMu.Lock()
	u.sender.sendmmsg = fake
	u.drainer.sendmmsg = fake
	u.sendMu.Unlock()
}
