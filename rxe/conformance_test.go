package rxe_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/verbstest"
)

// TestConformance runs the verbs conformance suite on two software devices
// joined by an in-memory network.
func TestConformance(t *testing.T) {
	network := link.NewNetwork(99)
	var devs []*verbs.Device
	for _, a := range []string{"10.99.0.1", "10.99.0.2"} {
		l, err := network.Attach(netip.MustParseAddr(a))
		if err != nil {
			t.Fatal(err)
		}
		dev, err := rxe.NewDevice(rxe.Config{Name: "conf_" + a, Links: []link.Link{l}, NetdevMTU: 1500})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, dev)
		// The device closes its links with its last context: hold one
		// open for the whole run.
		ctx, err := dev.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ctx.Close()
	}
	verbstest.Run(t, verbstest.Target{A: devs[0], B: devs[1]})
}

// TestDeviceWithClosedLinksRefusesToOpen: a device made with links closes
// them with its last context; opening it again is an error, not a device
// that silently drops every packet.
func TestDeviceWithClosedLinksRefusesToOpen(t *testing.T) {
	l, err := link.NewNetwork(98).Attach(netip.MustParseAddr("10.98.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rxe.NewDevice(rxe.Config{Name: "closed_links", Links: []link.Link{l}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	ctx.Close()
	if ctx, err := dev.Open(); !errors.Is(err, verbs.ErrClosed) {
		if ctx != nil {
			ctx.Close()
		}
		t.Fatalf("reopening: %v, want ErrClosed", err)
	}
}
