// Package rxe is rdmago's software RDMA device: a RoCEv2 NIC written in Go
// that speaks the same packets as Linux Soft-RoCE (drivers/infiniband/sw/rxe)
// over UDP port 4791. Importing the package registers its devices with
// package verbs, one per network interface, named like Linux's ("rxe_lo",
// "rxe_eth0"); its GID table holds the interface's IP addresses.
//
// Each device binds <addr>:4791 for every address it serves. Two processes
// on one host therefore use two addresses: set RDMAGO_RXE_ADDR=127.0.0.2
// (a comma-separated list) in one of them and its devices serve only the
// addresses listed. RDMAGO_RXE_PORT sets another UDP port for private
// setups and tests; every device of such a setup must use the same one.
// NewDevice creates a device on a chosen address or on any link.Link (such
// as the in-memory, fault-injecting network of package link).
//
// Inside a device, every queue pair has one goroutine that owns all of its
// protocol state — PSNs, the retransmission state of the requester, the
// responder's resources — and is fed by the device's receive loop and by
// the posting goroutines through queues, as DESIGN.md lays out.
package rxe
