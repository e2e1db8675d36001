package rdmacm

import (
	"net/netip"
	"testing"
)

// TestRouteSourceAgreesWithTheNetPackage: the source address found with
// bare system calls is the one a UDP socket of the net package connected
// to the same destination gets, broadcast addresses included, and a
// destination it cannot connect to (a link-local multicast group with no
// interface named) fails both ways.
func TestRouteSourceAgreesWithTheNetPackage(t *testing.T) {
	for _, dst := range []string{"127.0.0.1", "127.0.0.2", "::ffff:127.0.0.3", "::1", "192.0.2.1", "2001:db8::1", "0.0.0.0", "ff02::1",
		"255.255.255.255", "::ffff:255.255.255.255", "127.255.255.255"} {
		d := netip.MustParseAddr(dst)
		got, err := routeSource(d)
		want, werr := routeSourceNet(d)
		if (err == nil) != (werr == nil) || got != want {
			t.Errorf("routeSource(%v) = %v, %v; the net package finds %v, %v", d, got, err, want, werr)
		}
	}
}
