// Package rxe is rdmago's software RDMA device: a RoCEv2 NIC written in Go
// that speaks the same packets as Linux Soft-RoCE (drivers/infiniband/sw/rxe)
// over UDP port 4791. Importing the package registers its devices with
// package verbs, one per network interface, named like Linux's ("rxe_lo",
// "rxe_eth0"); its GID table holds the interface's IP addresses.
//
// Any number of processes of one user use a device at once, as they share
// Linux's rxe0: the first to bind <addr>:4791 hands every other process the
// packets of its QPs (see share.go and link.Shared), and another takes the
// port over when it ends. A process of another user (root excepted) is
// refused with EADDRINUSE when the device comes up: it neither sees the
// group's packets nor passes it any. A device comes up on the network with its first
// QP, so opening and querying it needs no socket. RDMAGO_RXE_ADDR (a
// comma-separated list) limits the devices to the addresses it names;
// RDMAGO_RXE_PORT sets another UDP port for private setups and tests, and
// every device of such a setup must use the same one.
// NewDevice creates a device on a chosen address or on any link.Link (such
// as the in-memory, fault-injecting network of package link).
//
// Inside a device, every queue pair has one goroutine that owns all of its
// protocol state — PSNs, the retransmission state of the requester, the
// responder's resources — and is fed by the device's receive loop and by
// the posting goroutines through queues, as ARCHITECTURE.md lays out. Its
// protocol engine is three types, as Linux rxe's: the requester, the
// completer and the responder, each driven by WQEs, packets and the time
// it is given.
package rxe
