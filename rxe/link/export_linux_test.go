package link

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Hooks for the black-box tests to see what the kernel did.

// GROEnabled reports whether u reads coalesced datagrams (UDP_GRO).
func GROEnabled(u *UDP) bool { return u.receiver.gro }

// GSOEnabled reports whether u sends runs of packets as UDP GSO sends.
func GSOEnabled(u *UDP) bool {
	u.sendMu.Lock()
	defer u.sendMu.Unlock()
	return u.sender.gso && !u.noGSO.Load()
}

// DatagramsRead returns how many datagrams u has read with GRO on.
func DatagramsRead(u *UDP) uint64 {
	u.recvMu.Lock()
	defer u.recvMu.Unlock()
	return u.receiver.datagramsRead
}

// PushBack makes u's socket refuse messages (EAGAIN) but for those room
// lets through: room is called before each system call, by Send's own
// sender or by the drainer's, with the messages it would send, and returns
// how many may go. A drainer refused waits a millisecond, as if parked
// until the socket has room (the real socket always has).
func PushBack(u *UDP, room func(drainer bool, n int) int) {
	fake := func(drainer bool) func(fd uintptr, hdrs *mmsghdr, n int) (int, syscall.Errno) {
		return func(fd uintptr, hdrs *mmsghdr, n int) (int, syscall.Errno) {
			if k := room(drainer, n); k < n {
				if k == 0 {
					if drainer {
						time.Sleep(time.Millisecond)
					}
					return 0, unix.EAGAIN
				}
				n = k
			}
			return sendmmsg(fd, hdrs, n)
		}
	}
	u.sendMu.Lock()
	u.sender.sendmmsg = fake(false)
	u.drainer.sendmmsg = fake(true)
	u.sendMu.Unlock()
}

// BatchSize is the most packets one sendmmsg call sends.
const BatchSize = batchSize

// QueueSlots returns the length of u's send queue's slice: the packets
// waiting, and those sent that it has not let go of yet.
func QueueSlots(u *UDP) int {
	u.sendMu.Lock()
	defer u.sendMu.Unlock()
	return len(u.queue.pkts)
}
