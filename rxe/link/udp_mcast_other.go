//go:build !linux

package link

import (
	"errors"
	"net"
	"net/netip"
)

// listenGroup is not available here: binding a socket to exactly a group
// address is Linux's behaviour.
func listenGroup(group, local netip.Addr, ifi *net.Interface, port uint16) (*net.UDPConn, error) {
	return nil, errors.New("multicast groups are supported on Linux only")
}
