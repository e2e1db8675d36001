package rdmacm

import (
	"net/netip"
	"syscall"
)

// The IB CM's hooks.
//
// On a device whose provider registered no Backend (the software device,
// rxe), this package runs the IB CM itself: it opens the device, makes
// its QP1 and sends and receives the CM's MADs (REQ, REP, RTU, REJ, MRA,
// DREQ, DREP, SIDR_REQ, SIDR_REP) there, with their retries, timewait and
// multicast joins. Such a device needs nothing more to take part, but a
// device driver (verbs.DeviceDriver) may also implement the interfaces
// below; the connection manager finds them by type assertion. They serve
// a device that several processes share (one UDP port, one GID table):
// each process runs its own IB CM on it, and the device must route each
// MAD to the right one; and they make the IB CM quicker.
//
// Without CommIDOwner, the upper 8 bits of communication IDs are 0;
// without ServiceClaimer, a listener claims nothing (it is the device's
// only process); without UnreachableNotifier, a REQ to a host with no
// RoCE device is retried until its retries run out; without UDPPorter,
// the device speaks RoCEv2 on 4791; without QP1Notifier, a goroutine of
// the connection manager waits for QP1's receives.

// CommIDOwner is what a device that several processes share tells each
// one's connection manager: the upper 8 bits its communication IDs (and
// SIDR request IDs) must have for the device to route the answers to its
// messages to it. ok is false on a device no other process shares.
type CommIDOwner interface {
	CommIDOwner() (owner uint8, ok bool)
}

// ServiceClaimer is a device that several processes share, on which a
// listener claims its service ID (on one of the device's addresses, or on
// all when addr is unspecified), so that connection requests for it reach
// its process. release gives the claim up.
type ServiceClaimer interface {
	ClaimService(addr netip.Addr, id uint64) (release func(), err error)
}

// UnreachableNotifier is a device that says when a MAD it sent found no
// RoCE device at its destination (an ICMP port or host unreachable): fn
// gets the destination, the errno (ECONNREFUSED for a port unreachable)
// and the packet as sent. The connection manager then fails the REQ or
// SIDR_REQ at once; it sets fn to nil when it stops using the device.
type UnreachableNotifier interface {
	OnCMUnreachable(fn func(dst netip.Addr, errno syscall.Errno, pkt []byte))
}

// QP1Notifier is a device that calls fn each time QP1 has completed
// receives, on a goroutine that holds none of the device's locks (the one
// that took the MADs off the network, as the kernel's MAD layer handles
// them from the CQ's completion handler). The connection manager then
// handles them on that goroutine, instead of waking one of its own for
// each MAD; without it, a goroutine waits on QP1's receive CQ. It sets fn
// to nil when it stops using the device.
type QP1Notifier interface {
	OnQP1Receive(fn func())
}

// UDPPorter is a device that speaks RoCEv2 on a UDP port other than 4791,
// which error messages name.
type UDPPorter interface {
	UDPPort() uint16
}
