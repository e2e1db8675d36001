package rdmacm_test

import (
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// TestSoftwareDeviceOffersEveryQP1Hook: the software device, which shares
// an address between processes, implements each hook the IB CM looks for
// (rxe may not import rdmacm, so nothing else checks that the method
// names still match).
func TestSoftwareDeviceOffersEveryQP1Hook(t *testing.T) {
	l, err := link.NewNetwork(71).Attach(netip.MustParseAddr("10.71.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
	if err != nil {
		t.Fatal(err)
	}
	drv := verbs.DeviceDriverOf(dev)
	for name, ok := range map[string]bool{
		"CommIDOwner":         is[rdmacm.CommIDOwner](drv),
		"ServiceClaimer":      is[rdmacm.ServiceClaimer](drv),
		"UnreachableNotifier": is[rdmacm.UnreachableNotifier](drv),
		"UDPPorter":           is[rdmacm.UDPPorter](drv),
	} {
		if !ok {
			t.Errorf("the software device's driver does not implement rdmacm.%s", name)
		}
	}
}

func is[T any](v any) bool {
	_, ok := v.(T)
	return ok
}
