package fabric

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
)

// Addr is an address's handle in an address vector (fi_addr_t).
type Addr uint64

// AddrNotAvail is FI_ADDR_NOTAVAIL: no address.
const AddrNotAvail Addr = ^Addr(0)

// AVAttr describes an address vector (struct fi_av_attr).
type AVAttr struct {
	Type  AVType
	Count int
}

// AV is an address vector (fi_av_open): a table of peer addresses that
// connectionless endpoints send to by handle. Connected endpoints (FI_EP_MSG)
// need none, but a program may keep its peers' addresses in one all the
// same, as libfabric allows.
type AV struct {
	Attr AVAttr

	mu      sync.Mutex
	entries []avEntry
	free    []Addr
}

// avEntry is one address: a socket address, or the bytes of a name of
// another format (FI_ADDR_IB_UD).
type avEntry struct {
	ap     netip.AddrPort
	format AddrFormat // of raw
	raw    []byte
}

func (e avEntry) valid() bool { return e.ap.IsValid() || e.raw != nil }

// OpenAV opens an address vector (fi_av_open); the type defaults to
// FI_AV_TABLE.
func (d *Domain) OpenAV(attr *AVAttr) (*AV, error) {
	av := &AV{}
	if attr != nil {
		av.Attr = *attr
	}
	if av.Attr.Type == AVUnspec {
		av.Attr.Type = AVTable
	}
	return av, nil
}

// Insert adds addresses and returns their handles (fi_av_insert).
func (av *AV) Insert(addrs ...netip.AddrPort) ([]Addr, error) {
	av.mu.Lock()
	defer av.mu.Unlock()
	out := make([]Addr, len(addrs))
	for i, a := range addrs {
		if !a.IsValid() {
			return out[:i], Errorf("fi_av_insert", ErrInvalid, "address "+strconv.Itoa(i)+" is not valid")
		}
		out[i] = av.insertLocked(avEntry{ap: a})
	}
	return out, nil
}

// insertLocked stores e in a free slot. Called with av.mu held.
func (av *AV) insertLocked(e avEntry) Addr {
	if n := len(av.free); n > 0 {
		h := av.free[n-1]
		av.free = av.free[:n-1]
		av.entries[h] = e
		return h
	}
	av.entries = append(av.entries, e)
	return Addr(len(av.entries) - 1)
}

// InsertName adds a name in bytes, as a peer's fi_getname gave it (see
// GetName), and returns its handle (fi_av_insert): a struct sockaddr of
// the sockaddr formats, a UDName's bytes of FI_ADDR_IB_UD.
func (av *AV) InsertName(f AddrFormat, name []byte) (Addr, error) {
	e := avEntry{format: f}
	switch {
	case isSockaddrFormat(f):
		a, err := ParseSockaddr(f, name)
		if err != nil {
			return AddrNotAvail, err
		}
		e = avEntry{ap: a}
	case f == FormatIBUD:
		if _, err := ParseUDName(name); err != nil {
			return AddrNotAvail, err
		}
		e.raw = append([]byte(nil), name[:UDNameLen]...)
	default:
		return AddrNotAvail, Errorf("fi_av_insert", ErrInvalid, "names of format "+f.String()+" are not known here")
	}
	av.mu.Lock()
	defer av.mu.Unlock()
	return av.insertLocked(e), nil
}

// LookupName returns a handle's name in bytes and its format
// (fi_av_lookup).
func (av *AV) LookupName(h Addr) (AddrFormat, []byte, error) {
	av.mu.Lock()
	defer av.mu.Unlock()
	if uint64(h) >= uint64(len(av.entries)) || !av.entries[h].valid() {
		return FormatUnspec, nil, Errorf("fi_av_lookup", ErrInvalid, "no address with that handle")
	}
	e := av.entries[h]
	if e.raw != nil {
		return e.format, e.raw, nil
	}
	f, b := SockaddrBytes(e.ap)
	return f, b, nil
}

// InsertSvc resolves node and service and adds the address
// (fi_av_insertsvc).
func (av *AV) InsertSvc(node, service string) (Addr, error) {
	a, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(node, service))
	if err != nil {
		return AddrNotAvail, Errorf("fi_av_insertsvc", ErrNoData, err.Error())
	}
	h, err := av.Insert(a.AddrPort())
	if err != nil {
		return AddrNotAvail, err
	}
	return h[0], nil
}

// Lookup returns the socket address of a handle (fi_av_lookup); a name
// of another format is LookupName's.
func (av *AV) Lookup(h Addr) (netip.AddrPort, error) {
	av.mu.Lock()
	defer av.mu.Unlock()
	if uint64(h) >= uint64(len(av.entries)) || !av.entries[h].valid() {
		return netip.AddrPort{}, Errorf("fi_av_lookup", ErrInvalid, "no address with that handle")
	}
	if !av.entries[h].ap.IsValid() {
		return netip.AddrPort{}, Errorf("fi_av_lookup", ErrInvalid, "the address is of format "+av.entries[h].format.String()+": use LookupName")
	}
	return av.entries[h].ap, nil
}

// Remove takes addresses out (fi_av_remove); their handles may be reused.
func (av *AV) Remove(hs ...Addr) error {
	av.mu.Lock()
	defer av.mu.Unlock()
	for _, h := range hs {
		if uint64(h) >= uint64(len(av.entries)) || !av.entries[h].valid() {
			return Errorf("fi_av_remove", ErrInvalid, "no address with that handle")
		}
		av.entries[h] = avEntry{}
		av.free = append(av.free, h)
	}
	return nil
}

// Find returns the handle of an address, or AddrNotAvail: what a
// provider uses to name the source of a message.
func (av *AV) Find(a netip.AddrPort) Addr {
	av.mu.Lock()
	defer av.mu.Unlock()
	want := netip.AddrPortFrom(a.Addr().Unmap().WithZone(""), a.Port())
	for i, e := range av.entries {
		if x := e.ap; x.IsValid() && netip.AddrPortFrom(x.Addr().Unmap().WithZone(""), x.Port()) == want {
			return Addr(i)
		}
	}
	return AddrNotAvail
}

// Close closes the address vector (fi_close).
func (av *AV) Close() error { return nil }
