package rxe

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// Environment variables that choose what the registered devices serve.
const (
	// EnvAddr lists the IP addresses (comma-separated) the devices serve;
	// each device keeps only the listed addresses of its interface.
	EnvAddr = "RDMAGO_RXE_ADDR"
	// EnvPort sets the UDP port (default 4791).
	EnvPort = "RDMAGO_RXE_PORT"
)

func init() { verbs.RegisterProvider(provider{}) }

type provider struct{}

func (provider) Name() string { return "rxe" }

// registry keeps the devices made for each interface, so that Devices
// returns the same *verbs.Device each time and two Opens share one
// device's sockets and QP numbers.
var registry struct {
	mu      sync.Mutex
	devices map[string]*verbs.Device
	// The last list Devices made, when, and for which environment.
	last []*verbs.Device
	at   time.Time
	// envAddr and envPort are the variables as they read then: a list
	// made for the same strings is the answer again, with no parsing.
	envAddr, envPort string
}

// devicesFresh is how long a device list stays the answer: reading the
// host's interfaces and addresses takes netlink dumps, hundreds of
// microseconds, which a connection manager asking for every connection
// would otherwise pay each time.
const devicesFresh = time.Second

// Devices lists one device per network interface that is up and has an
// address (ibv_get_device_list for the rxe provider). It reads the
// interfaces again when the last reading is more than devicesFresh old or
// the environment variables have changed.
func (provider) Devices() ([]*verbs.Device, error) {
	rawAddr, rawPort := os.Getenv(EnvAddr), os.Getenv(EnvPort)
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if rawAddr == registry.envAddr && rawPort == registry.envPort && time.Since(registry.at) < devicesFresh {
		return slices.Clone(registry.last), nil
	}
	want, err := parseEnvAddrs(rawAddr)
	if err != nil {
		return nil, err
	}
	port, err := parseEnvPort(rawPort)
	if err != nil {
		return nil, err
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("rxe: listing network interfaces: %w", err)
	}
	if registry.devices == nil {
		registry.devices = map[string]*verbs.Device{}
	}
	var out []*verbs.Device
	served := map[netip.Addr]bool{}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs := interfaceAddrs(&ifc, want)
		if len(addrs) == 0 {
			continue
		}
		for _, a := range addrs {
			served[a.WithZone("")] = true
		}
		name := "rxe_" + ifc.Name
		cfg := Config{Name: name, Addrs: addrs, Port: port, NetdevMTU: ifc.MTU, Netdev: ifc.Name}
		// The same device again, unless what it serves has changed
		// (addresses, MTU, or the environment variables).
		key := fmt.Sprint(name, addrs, port, ifc.MTU)
		d, ok := registry.devices[key]
		if !ok {
			d = newDevice(cfg)
			registry.devices[key] = d
		}
		out = append(out, d)
	}
	for _, w := range want {
		if !served[w.WithZone("")] {
			return nil, fmt.Errorf("rxe: %s names %v, which is not an address of an interface of this host that is up", EnvAddr, w)
		}
	}
	registry.last, registry.at = out, time.Now()
	registry.envAddr, registry.envPort = rawAddr, rawPort
	return slices.Clone(out), nil
}

// interfaceAddrs returns the interface's addresses in GID table order:
// IPv6 link-local first (Linux's default GID), then IPv4, then other IPv6.
// If want is not nil, only addresses in want, or (for loopback) listed
// addresses inside the interface's prefixes, are kept.
func interfaceAddrs(ifc *net.Interface, want []netip.Addr) []netip.Addr {
	as, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var ll, v4, v6 []netip.Addr
	add := func(a netip.Addr) {
		switch {
		case a.Is4():
			v4 = append(v4, a)
		case a.IsLinkLocalUnicast():
			ll = append(ll, a.WithZone(ifc.Name)) // a link-local address binds only with its zone
		default:
			v6 = append(v6, a)
		}
	}
	for _, a := range as {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		pfx, ok := netipPrefix(ipn)
		if !ok {
			continue
		}
		if want == nil {
			add(pfx.Addr())
			continue
		}
		for _, w := range want {
			if w == pfx.Addr() || ifc.Flags&net.FlagLoopback != 0 && pfx.Contains(w) {
				add(w)
			}
		}
	}
	return append(append(ll, v4...), v6...)
}

func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	a = a.Unmap()
	if a.Is4() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), true
}

// parseEnvAddrs parses the value of EnvAddr.
func parseEnvAddrs(s string) ([]netip.Addr, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("rxe: %s=%q: %w", EnvAddr, s, err)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// parseEnvPort parses the value of EnvPort.
func parseEnvPort(s string) (uint16, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return wire.UDPPort, nil
	}
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("rxe: %s=%q is not a UDP port", EnvPort, s)
	}
	return uint16(p), nil
}

// Config describes a device for NewDevice.
type Config struct {
	// Name is the device name (default "rxe_" and the first address).
	Name string
	// Addrs are the IP addresses the device serves: its GID table. It
	// binds a UDP socket to each when opened. Ignored if Links is set.
	Addrs []netip.Addr
	// Port is the UDP port (default 4791).
	Port uint16
	// NetdevMTU is the MTU of the network interface underneath; the active
	// path MTU is derived from it as Linux rxe does (default 1500; 65536
	// for loopback addresses).
	NetdevMTU int
	// Netdev names the interface, for display.
	Netdev string
	// Links, if set, are used instead of UDP sockets: one per GID, in
	// order. The device owns them and closes them when the last context
	// is closed; it cannot be opened again after that.
	Links []link.Link

	// clock, if set, is the engine's time instead of the wall clock
	// (tests).
	clock clock
}

// NewDevice creates a device serving cfg's addresses or links. Unlike the
// devices of the registry, it is not listed by verbs.Devices.
func NewDevice(cfg Config) (*verbs.Device, error) {
	if len(cfg.Links) == 0 && len(cfg.Addrs) == 0 {
		return nil, errors.New("rxe: a device needs an address or a link")
	}
	for i, a := range cfg.Addrs {
		cfg.Addrs[i] = a.Unmap()
	}
	if len(cfg.Links) > 0 {
		cfg.Addrs = cfg.Addrs[:0:0]
		for _, l := range cfg.Links {
			cfg.Addrs = append(cfg.Addrs, l.LocalAddr().Unmap())
		}
		cfg.Port = cfg.Links[0].Port()
	}
	if cfg.Port == 0 {
		cfg.Port = wire.UDPPort
	}
	if cfg.Name == "" {
		cfg.Name = "rxe_" + cfg.Addrs[0].String()
	}
	return newDevice(cfg), nil
}

func newDevice(cfg Config) *verbs.Device {
	if cfg.NetdevMTU == 0 {
		cfg.NetdevMTU = 1500
		if cfg.Addrs[0].IsLoopback() {
			cfg.NetdevMTU = 65536
		}
	}
	h := fnv.New64a()
	h.Write([]byte(cfg.Name))
	for _, a := range cfg.Addrs {
		b := a.As16()
		h.Write(b[:])
	}
	guid := h.Sum64()&^0xff00000000000000 | 0x0200000000000000 // locally administered
	return verbs.NewDevice(cfg.Name, guid, &device{cfg: cfg, guid: guid})
}

// activeMTU derives the RoCE path MTU from a netdev MTU as Linux rxe does:
// the largest IB MTU not above the netdev MTU less the RoCEv2 headers.
func activeMTU(netdevMTU int) verbs.MTU {
	m := verbs.MTUFromBytes(netdevMTU - roceOverhead)
	if m == 0 {
		return verbs.MTU256
	}
	return m
}

// roceOverhead is what Linux rxe subtracts from the netdev MTU: IPv6 and
// UDP headers, BTH, the largest extended headers and the ICRC, rounded.
const roceOverhead = 80

var _ verbs.Provider = provider{}
