//go:build !linux

package link

import (
	"errors"
	"net/netip"
)

// Shared is, off Linux, a UDP link this process has to itself: sharing an
// address between processes needs Linux's abstract Unix sockets.
type Shared struct {
	*UDP
	owner uint8
}

// TakeoverInterval is unused off Linux.
var TakeoverInterval = 0

// ErrOwnerTaken means another process of the host has the owner number
// asked for on the address.
var ErrOwnerTaken = errors.New("rxe/link: owner number in use on this address")

// ErrServiceTaken means another process of the host has claimed the
// service.
var ErrServiceTaken = errors.New("rxe/link: service claimed by another process on this address")

// ListenShared binds addr for this process alone.
func ListenShared(addr netip.AddrPort, owner uint8, opt UDPOptions) (*Shared, error) {
	u, err := ListenUDP(addr, opt)
	if err != nil {
		return nil, err
	}
	return &Shared{UDP: u, owner: owner}, nil
}

// Owner returns the owner number.
func (s *Shared) Owner() uint8 { return s.owner }

// Leading is true: the process holds the port.
func (s *Shared) Leading() bool { return true }

// Forward drops the packet: no other process shares the address.
func (s *Shared) Forward(owner uint8, p *Packet) error { return nil }

// Flush does nothing: Forward queues nothing.
func (s *Shared) Flush() {}

// RegisterService claims nothing: no other process shares the address.
func (s *Shared) RegisterService(id uint64) (func(), error) { return func() {}, nil }

// ServiceOwner returns this process's owner number.
func (s *Shared) ServiceOwner(id uint64) (owner uint8, ok, unknown bool) {
	return s.owner, true, false
}

// Refused returns 0: no other process shares the address.
func (s *Shared) Refused() uint64 { return 0 }

// Admitted returns 0: no other process shares the address.
func (s *Shared) Admitted() uint64 { return 0 }

// OwnerHeld reports whether a process holds owner number owner on the
// address: only this one, as no other process shares it.
func (s *Shared) OwnerHeld(owner uint8) bool { return owner == s.owner }
