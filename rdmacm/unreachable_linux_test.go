package rdmacm_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/verbs"
)

// A connection request to an address where no RoCE device listens fails
// at once, from the ICMP port unreachable the host answers with, instead
// of after a minute and more of resent REQs; the error names the address
// and the step.
func TestDialWhereNoDeviceListensFailsAtOnce(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	dev, err := rxe.NewDevice(rxe.Config{Name: "rxe_unreach", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.2")}, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rdmacm.RegisterDevice(dev))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = rdmacm.Dial(ctx, "127.0.0.3:7471", &rdmacm.Options{LocalAddr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), 0)})
	took := time.Since(start)
	if err == nil {
		t.Fatal("Dial succeeded")
	}
	if took > 2*time.Second {
		t.Errorf("Dial took %v to fail", took)
	}
	if !errors.Is(err, verbs.ErrConnRefused) {
		t.Errorf("errors.Is(%v, verbs.ErrConnRefused) = false", err)
	}
	for _, want := range []string{"connecting", "no RoCE device answered at 127.0.0.3", "UNREACHABLE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
