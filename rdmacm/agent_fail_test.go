package rdmacm

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/verbs"
)

// A device that cannot come up (its port held by another program, or by
// another user's processes) fails the connection manager's start with
// the device's error, and takes nothing down with it.
func TestAgentOfADeviceThatCannotComeUpFails(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	dev, err := rxe.NewDevice(rxe.Config{Name: "rxe_held", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer RegisterDevice(dev)()
	cm.mu.Lock()
	_, err = agentFor(dev)
	cmUnlock()
	if !errors.Is(err, verbs.ErrAddrInUse) {
		t.Fatalf("agentFor: %v; want the device's EADDRINUSE", err)
	}
}
