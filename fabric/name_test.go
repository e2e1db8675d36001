package fabric_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/fabric"
)

// A UD name has C's layout (struct ofi_ib_ud_ep_name): the bytes below
// are a name captured from libfabric's verbs provider on the kernel's
// rxe (vm1's fi_pingpong server), and it prints as fi_tostr prints it.
func TestUDNameHasCsLayout(t *testing.T) {
	captured := []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x77, 0, 0x0b,
		0x39, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}
	n, err := fabric.ParseUDName(captured)
	if err != nil {
		t.Fatal(err)
	}
	if n.QPN != 0x39 || n.LID != 0 || n.PKey != 0xffff || netip.AddrFrom16(n.GID).String() != "fe80::5054:ff:fe77:b" {
		t.Fatalf("parsed %+v", n)
	}
	if !bytes.Equal(n.Bytes(), captured) {
		t.Fatalf("bytes %x, want %x", n.Bytes(), captured)
	}
	if got, want := n.String(), "fi_addr_ib_ud://fe80::5054:ff:fe77:b:39/0/ffff/0"; got != want {
		t.Fatalf("String %q, want %q", got, want)
	}
	if got := (fabric.UDName{}).String(); got != "fi_addr_ib_ud://:::0/0/0/0" {
		t.Fatalf("zero name prints %q (C's fi_info prints fi_addr_ib_ud://:::0/0/0/0)", got)
	}
	if _, err := fabric.ParseUDName(captured[:31]); !errors.Is(err, fabric.ErrInvalid) {
		t.Fatalf("31 bytes: %v", err)
	}
}

// Names in bytes go into an AV and come back out: socket addresses as
// struct sockaddr_in / sockaddr_in6 (Lookup still gives them as
// netip.AddrPort), UD names as they are; formats the AV does not know are
// refused.
func TestAVTakesNamesInBytes(t *testing.T) {
	d := &fabric.Domain{}
	av, _ := d.OpenAV(nil)
	v4 := netip.MustParseAddrPort("10.77.0.1:47592")
	f, b := fabric.SockaddrBytes(v4)
	if f != fabric.FormatSockaddrIn || len(b) != 16 {
		t.Fatalf("sockaddr_in: %v %d bytes", f, len(b))
	}
	h4, err := av.InsertName(f, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := av.Lookup(h4); err != nil || got != v4 {
		t.Fatalf("lookup %v %v", got, err)
	}
	v6 := netip.MustParseAddrPort("[fd77::1]:9")
	f6, b6 := fabric.SockaddrBytes(v6)
	if f6 != fabric.FormatSockaddrIn6 || len(b6) != 28 {
		t.Fatalf("sockaddr_in6: %v %d bytes", f6, len(b6))
	}
	if a, err := fabric.ParseSockaddr(fabric.FormatSockaddr, b6); err != nil || a != v6 {
		t.Fatalf("FI_SOCKADDR takes the family from the bytes: %v %v", a, err)
	}
	ud := fabric.UDName{QPN: 0x11, PKey: 0xffff}
	ud.GID[10], ud.GID[11], ud.GID[15] = 0xff, 0xff, 1
	hu, err := av.InsertName(fabric.FormatIBUD, ud.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f, got, err := av.LookupName(hu); err != nil || f != fabric.FormatIBUD || !bytes.Equal(got, ud.Bytes()) {
		t.Fatalf("LookupName %v %x %v", f, got, err)
	}
	if _, err := av.Lookup(hu); !errors.Is(err, fabric.ErrInvalid) {
		t.Fatalf("Lookup of a UD name: %v", err)
	}
	if av.Find(v4) != h4 {
		t.Fatal("Find lost the socket address among UD names")
	}
	for _, c := range []struct {
		f fabric.AddrFormat
		b []byte
	}{
		{fabric.FormatSockaddrIn, b[:7]},
		{fabric.FormatSockaddrIn6, b},
		{fabric.FormatIBUD, b},
		{fabric.FormatAddrStr, []byte("x")},
	} {
		if _, err := av.InsertName(c.f, c.b); !errors.Is(err, fabric.ErrInvalid) {
			t.Errorf("InsertName(%v, %d bytes): %v, want ErrInvalid", c.f, len(c.b), err)
		}
	}
}

// FuzzAVInsertName: any bytes of any format are taken or refused with
// an error, and a name taken comes back from LookupName as it went in
// (socket addresses in their canonical layout).
func FuzzAVInsertName(f *testing.F) {
	_, v4 := fabric.SockaddrBytes(netip.MustParseAddrPort("10.0.0.1:1"))
	_, v6 := fabric.SockaddrBytes(netip.MustParseAddrPort("[fe80::1]:2"))
	f.Add(uint32(fabric.FormatSockaddrIn), v4)
	f.Add(uint32(fabric.FormatSockaddrIn6), v6)
	f.Add(uint32(fabric.FormatSockaddr), v6)
	f.Add(uint32(fabric.FormatIBUD), fabric.UDName{QPN: 5}.Bytes())
	f.Fuzz(func(t *testing.T, format uint32, name []byte) {
		d := &fabric.Domain{}
		av, _ := d.OpenAV(nil)
		h, err := av.InsertName(fabric.AddrFormat(format), name)
		if err != nil {
			return
		}
		f, got, err := av.LookupName(h)
		if err != nil {
			t.Fatalf("inserted, then LookupName: %v", err)
		}
		if f == fabric.FormatIBUD {
			if !bytes.Equal(got, name[:fabric.UDNameLen]) {
				t.Fatalf("UD name %x came back as %x", name, got)
			}
			return
		}
		a, err := fabric.ParseSockaddr(f, got)
		if err != nil {
			t.Fatalf("LookupName gave a name ParseSockaddr refuses: %v", err)
		}
		// (An IPv4-mapped address in a sockaddr_in6 comes back as a
		// sockaddr_in: the canonical layout.)
		if b, err := av.Lookup(h); err != nil || b.Addr().Unmap() != a.Addr().Unmap() || b.Port() != a.Port() {
			t.Fatalf("Lookup %v %v, LookupName %v", b, err, a)
		}
	})
}
