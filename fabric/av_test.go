package fabric_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/fabric"
)

func TestAddressVectorHandlesComeBackAndAreReused(t *testing.T) {
	d := &fabric.Domain{}
	av, _ := d.OpenAV(nil)
	a, b := netip.MustParseAddrPort("10.0.0.1:7"), netip.MustParseAddrPort("[fd00::1]:8")
	hs, err := av.Insert(a, b)
	if err != nil || len(hs) != 2 || hs[0] == hs[1] {
		t.Fatalf("insert: %v %v", hs, err)
	}
	if got, _ := av.Lookup(hs[1]); got != b {
		t.Fatalf("lookup %v", got)
	}
	if err := av.Remove(hs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := av.Lookup(hs[0]); !errors.Is(err, fabric.ErrInvalid) {
		t.Fatalf("lookup of a removed address: %v", err)
	}
	if err := av.Remove(hs[0]); err == nil {
		t.Fatal("removed twice")
	}
	h, err := av.InsertSvc("127.0.0.1", "4000")
	if err != nil || h != hs[0] {
		t.Fatalf("insertsvc: %v %v (handle %v not reused)", h, err, hs[0])
	}
	if _, err := av.Insert(netip.AddrPort{}); err == nil {
		t.Fatal("inserted an invalid address")
	}
}
