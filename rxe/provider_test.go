package rxe

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// RDMAGO_RXE_ADDR naming an address the host does not have is an error
// naming it, not an empty device list.
func TestEnvAddrNamingAForeignAddressIsAnError(t *testing.T) {
	t.Setenv(EnvAddr, "127.0.0.1,192.0.2.77")
	_, err := provider{}.Devices()
	if err == nil || !strings.Contains(err.Error(), "192.0.2.77") || !strings.Contains(err.Error(), EnvAddr) {
		t.Fatalf("Devices() error %v, want one naming 192.0.2.77 and %s", err, EnvAddr)
	}
	t.Setenv(EnvAddr, "127.0.0.9") // inside lo's 127.0.0.0/8
	devs, err := provider{}.Devices()
	if err != nil || len(devs) != 1 {
		t.Fatalf("Devices() = %d devices, %v; want rxe_lo", len(devs), err)
	}
}

// The device tells the connection manager its addresses without being
// opened, through verbs.AddrLister.
func TestDeviceListsItsAddressesUnopened(t *testing.T) {
	dev, err := NewDevice(Config{Name: "rxe_addrs", Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.9")}})
	if err != nil {
		t.Fatal(err)
	}
	l, ok := verbs.DeviceDriverOf(dev).(verbs.AddrLister)
	if !ok {
		t.Fatal("the rxe device is not a verbs.AddrLister")
	}
	if got := l.Addrs(); len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.9") {
		t.Errorf("Addrs() = %v", got)
	}
	if dev.NodeType() != verbs.NodeCA || dev.TransportType() != verbs.TransportIB {
		t.Errorf("node %v transport %v", dev.NodeType(), dev.TransportType())
	}
}

// The device claims only what it does: it has no alternate paths, so no
// IBV_DEVICE_AUTO_PATH_MIG.
func TestDeviceClaimsNoAutomaticPathMigration(t *testing.T) {
	ctx := openDevice(t, Config{Name: "rxe_caps", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	a, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if a.DeviceCapFlags&verbs.DeviceAutoPathMig != 0 {
		t.Fatalf("device cap flags %#x claim automatic path migration", a.DeviceCapFlags)
	}
}
