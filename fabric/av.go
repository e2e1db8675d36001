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

	mu    sync.Mutex
	addrs []netip.AddrPort
	free  []Addr
}

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
		if n := len(av.free); n > 0 {
			out[i] = av.free[n-1]
			av.free = av.free[:n-1]
			av.addrs[out[i]] = a
			continue
		}
		out[i] = Addr(len(av.addrs))
		av.addrs = append(av.addrs, a)
	}
	return out, nil
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

// Lookup returns the address of a handle (fi_av_lookup).
func (av *AV) Lookup(h Addr) (netip.AddrPort, error) {
	av.mu.Lock()
	defer av.mu.Unlock()
	if uint64(h) >= uint64(len(av.addrs)) || !av.addrs[h].IsValid() {
		return netip.AddrPort{}, Errorf("fi_av_lookup", ErrInvalid, "no address with that handle")
	}
	return av.addrs[h], nil
}

// Remove takes addresses out (fi_av_remove); their handles may be reused.
func (av *AV) Remove(hs ...Addr) error {
	av.mu.Lock()
	defer av.mu.Unlock()
	for _, h := range hs {
		if uint64(h) >= uint64(len(av.addrs)) || !av.addrs[h].IsValid() {
			return Errorf("fi_av_remove", ErrInvalid, "no address with that handle")
		}
		av.addrs[h] = netip.AddrPort{}
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
	for i, x := range av.addrs {
		if netip.AddrPortFrom(x.Addr().Unmap().WithZone(""), x.Port()) == want {
			return Addr(i)
		}
	}
	return AddrNotAvail
}

// Close closes the address vector (fi_close).
func (av *AV) Close() error { return nil }
