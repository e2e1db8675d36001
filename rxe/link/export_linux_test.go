package link

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
