//go:build !linux

package rdmacm

import "net/netip"

// routeSource returns the local address the host's routing table picks to
// reach dst (the source address rdma_resolve_addr finds). It sends nothing.
func routeSource(dst netip.Addr) (netip.Addr, error) { return routeSourceNet(dst) }
