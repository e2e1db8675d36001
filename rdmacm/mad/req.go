package mad

import "net/netip"

// GID is a 128-bit global identifier. On RoCEv2 it is the IPv6 address of
// the port, or an IPv4-mapped one (::ffff:a.b.c.d) for an IPv4 address.
type GID [16]byte

// GIDFromAddr returns the GID of an IPv4 or IPv6 address, mapping IPv4
// into ::ffff:0:0/96 as RoCEv2 does.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID as an IP address, unmapped if it is IPv4-mapped.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats the GID as an IPv6 address, or as the IPv4 address it maps.
func (g GID) String() string { return g.Addr().String() }

// REQPrivateDataLen and the other *PrivateDataLen constants are the sizes
// of the messages' private data areas.
const (
	REQPrivateDataLen     = 92
	MRAPrivateDataLen     = 222
	REJPrivateDataLen     = 148
	REPPrivateDataLen     = 196
	RTUPrivateDataLen     = 224
	DREQPrivateDataLen    = 220
	DREPPrivateDataLen    = 224
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
)

// Path is one path of a REQ, primary or alternate: the addressing the
// passive side's QP is to use (IBTA vol. 1 Table 106, bytes 52-95 and
// 96-139 of the REQ). In a REQ, "local" is the active side.
type Path struct {
	LocalLID  uint16 // 0xffff (permissive) on RoCE
	RemoteLID uint16
	LocalGID  GID
	RemoteGID GID
	// FlowLabel (20 bits) is the GRH flow label; on RoCEv2 Linux derives
	// the UDP source port of the connection from it.
	FlowLabel uint32
	// PacketRate (6 bits) is the static rate, in the encoding of enum
	// ib_rate (0 = port current, 2 = 2.5 Gb/s, 3 = 10 Gb/s, ...).
	PacketRate   uint8
	TrafficClass uint8
	HopLimit     uint8
	SL           uint8 // 4 bits
	SubnetLocal  bool
	// LocalACKTimeout (5 bits) is the ACK timeout exponent:
	// 4.096 µs << LocalACKTimeout.
	LocalACKTimeout uint8
}

// Offsets inside a path, from its first byte.
const (
	pathLocalLID   = 0
	pathRemoteLID  = 2
	pathLocalGID   = 4
	pathRemoteGID  = 20
	pathFlowLabel  = 36 // 20 bits, then 6 reserved bits and the packet rate
	pathPacketRate = 39
	pathTClass     = 40
	pathHopLimit   = 41
	pathSL         = 42 // SL:4, subnet local:1, reserved:3
	pathACKTimeout = 43 // local ACK timeout:5, then 3 bits (SAP supported in the alternate path)
	pathLen        = 44
)

func (p *Path) decode(b []byte) {
	*p = Path{
		LocalLID:        be16(b, pathLocalLID),
		RemoteLID:       be16(b, pathRemoteLID),
		LocalGID:        GID(b[pathLocalGID:]),
		RemoteGID:       GID(b[pathRemoteGID:]),
		FlowLabel:       be32(b, pathFlowLabel) >> 12,
		PacketRate:      b[pathPacketRate] & 0x3f,
		TrafficClass:    b[pathTClass],
		HopLimit:        b[pathHopLimit],
		SL:              b[pathSL] >> 4,
		SubnetLocal:     b[pathSL]>>3&1 != 0,
		LocalACKTimeout: b[pathACKTimeout] >> 3,
	}
}

func (p *Path) check(f *fields, name string, off int) {
	fit := func(field string, at int, v uint64, bits uint) {
		if v>>bits != 0 { // the field's name is built only for the error
			f.fit(name+field, off+at, v, bits)
		}
	}
	fit(".FlowLabel", pathFlowLabel, uint64(p.FlowLabel), 20)
	fit(".PacketRate", pathPacketRate, uint64(p.PacketRate), 6)
	fit(".SL", pathSL, uint64(p.SL), 4)
	fit(".LocalACKTimeout", pathACKTimeout, uint64(p.LocalACKTimeout), 5)
}

// encode writes the path to b, whose bytes are zero.
func (p *Path) encode(b []byte) {
	put16(b, pathLocalLID, p.LocalLID)
	put16(b, pathRemoteLID, p.RemoteLID)
	copy(b[pathLocalGID:], p.LocalGID[:])
	copy(b[pathRemoteGID:], p.RemoteGID[:])
	put32(b, pathFlowLabel, p.FlowLabel<<12)
	b[pathPacketRate] |= p.PacketRate
	b[pathTClass] = p.TrafficClass
	b[pathHopLimit] = p.HopLimit
	b[pathSL] = p.SL<<4 | bit(p.SubnetLocal, 3)
	b[pathACKTimeout] = p.LocalACKTimeout << 3
}

// REQ is ConnectRequest (IBTA vol. 1 §12.6, Table 106; struct cm_req_msg
// in Linux), sent by the active side to open an RC, UC, RD or XRC
// connection to a service. "Local" fields describe the sender.
type REQ struct {
	LocalCommID uint32
	// VendorID (24 bits) is the ECE vendor ID (IBTA 1.4; 0 unless ECE
	// is in use), in the otherwise reserved bytes 4-7 of the body.
	VendorID    uint32
	ServiceID   ServiceID
	LocalCAGUID uint64
	LocalQKey   uint32 // for RD; 0 for RC
	LocalQPN    uint32 // 24 bits
	// ResponderResources is the number of RDMA READ and atomic requests
	// the sender accepts at a time (its max_dest_rd_atomic).
	ResponderResources uint8
	LocalEECN          uint32 // 24 bits, RD only
	// InitiatorDepth is the number of RDMA READ and atomic requests the
	// sender will have outstanding (its max_rd_atomic).
	InitiatorDepth uint8
	RemoteEECN     uint32 // 24 bits, RD only
	// RemoteCMResponseTimeout (5 bits) is how long the sender waits for
	// the reply: 4.096 µs << RemoteCMResponseTimeout.
	RemoteCMResponseTimeout uint8
	TransportServiceType    TransportType // 2 bits
	EndToEndFlowControl     bool
	// StartingPSN (24 bits) is the PSN at which the sender's receive
	// queue starts: the passive side sends from it. (The rping capture
	// shows the passive side's first request carrying it.)
	StartingPSN uint32
	// LocalCMResponseTimeout (5 bits) is how long the sender takes to
	// answer CM messages, in the same encoding.
	LocalCMResponseTimeout uint8
	RetryCount             uint8 // 3 bits: transport retries
	PKey                   uint16
	PathMTU                MTU // 4 bits
	RDCExists              bool
	RNRRetryCount          uint8 // 3 bits; 7 means unlimited
	MaxCMRetries           uint8 // 4 bits
	SRQ                    bool
	ExtendedTransportType  uint8 // 3 bits, with TransportExtended
	Primary                Path
	Alternate              Path // all zero when there is none
	SAPSupported           bool // "SAP supported", bit 2 of body byte 139
	// PrivateData starts with rdma_cm's 36-byte cma_hdr when rdma_cm
	// sends the REQ; see [REQ.CMAHeader].
	PrivateData [REQPrivateDataLen]byte
}

// Offsets in a REQ body.
const (
	reqLocalCommID = 0
	reqVendorID    = 4 // 24 bits in bytes 5-7
	reqServiceID   = 8
	reqLocalCAGUID = 16
	reqLocalQKey   = 28
	reqLocalQPN    = 32 // QPN:24, responder resources:8
	reqRespRes     = 35
	reqLocalEECN   = 36 // EECN:24, initiator depth:8
	reqInitDepth   = 39
	reqRemoteEECN  = 40 // EECN:24, then byte 43
	reqByte43      = 43 // remote CM response timeout:5, transport type:2, e2e flow control:1
	reqStartingPSN = 44 // PSN:24, then byte 47
	reqByte47      = 47 // local CM response timeout:5, retry count:3
	reqPKey        = 48
	reqByte50      = 50 // path MTU:4, RDC exists:1, RNR retry count:3
	reqByte51      = 51 // max CM retries:4, SRQ:1, extended transport type:3
	reqPrimary     = 52
	reqAlternate   = 96
	reqSAP         = reqAlternate + pathACKTimeout
	reqPrivateData = 140
)

// AttrID returns AttrREQ.
func (m *REQ) AttrID() AttrID { return AttrREQ }

// Unmarshal decodes a 232-byte REQ body. Every field value is accepted.
func (m *REQ) Unmarshal(b []byte) error {
	if err := checkBody("REQ", b); err != nil {
		return err
	}
	*m = REQ{
		LocalCommID:             be32(b, reqLocalCommID),
		VendorID:                be32(b, reqVendorID) & 0xffffff,
		ServiceID:               ServiceID(be64(b, reqServiceID)),
		LocalCAGUID:             be64(b, reqLocalCAGUID),
		LocalQKey:               be32(b, reqLocalQKey),
		LocalQPN:                be24(b, reqLocalQPN),
		ResponderResources:      b[reqRespRes],
		LocalEECN:               be24(b, reqLocalEECN),
		InitiatorDepth:          b[reqInitDepth],
		RemoteEECN:              be24(b, reqRemoteEECN),
		RemoteCMResponseTimeout: b[reqByte43] >> 3,
		TransportServiceType:    TransportType(b[reqByte43] >> 1 & 3),
		EndToEndFlowControl:     b[reqByte43]&1 != 0,
		StartingPSN:             be24(b, reqStartingPSN),
		LocalCMResponseTimeout:  b[reqByte47] >> 3,
		RetryCount:              b[reqByte47] & 7,
		PKey:                    be16(b, reqPKey),
		PathMTU:                 MTU(b[reqByte50] >> 4),
		RDCExists:               b[reqByte50]>>3&1 != 0,
		RNRRetryCount:           b[reqByte50] & 7,
		MaxCMRetries:            b[reqByte51] >> 4,
		SRQ:                     b[reqByte51]>>3&1 != 0,
		ExtendedTransportType:   b[reqByte51] & 7,
		SAPSupported:            b[reqSAP]>>2&1 != 0,
	}
	m.Primary.decode(b[reqPrimary : reqPrimary+pathLen])
	m.Alternate.decode(b[reqAlternate : reqAlternate+pathLen])
	copy(m.PrivateData[:], b[reqPrivateData:])
	return nil
}

// Append appends the REQ's 232-byte body to b. It fails with a
// [*FieldError] if a field does not fit its bits.
func (m *REQ) Append(b []byte) ([]byte, error) {
	f := fields{msg: "REQ"}
	f.fit("VendorID", reqVendorID+1, uint64(m.VendorID), 24)
	f.fit("LocalQPN", reqLocalQPN, uint64(m.LocalQPN), 24)
	f.fit("LocalEECN", reqLocalEECN, uint64(m.LocalEECN), 24)
	f.fit("RemoteEECN", reqRemoteEECN, uint64(m.RemoteEECN), 24)
	f.fit("RemoteCMResponseTimeout", reqByte43, uint64(m.RemoteCMResponseTimeout), 5)
	f.fit("TransportServiceType", reqByte43, uint64(m.TransportServiceType), 2)
	f.fit("StartingPSN", reqStartingPSN, uint64(m.StartingPSN), 24)
	f.fit("LocalCMResponseTimeout", reqByte47, uint64(m.LocalCMResponseTimeout), 5)
	f.fit("RetryCount", reqByte47, uint64(m.RetryCount), 3)
	f.fit("PathMTU", reqByte50, uint64(m.PathMTU), 4)
	f.fit("RNRRetryCount", reqByte50, uint64(m.RNRRetryCount), 3)
	f.fit("MaxCMRetries", reqByte51, uint64(m.MaxCMRetries), 4)
	f.fit("ExtendedTransportType", reqByte51, uint64(m.ExtendedTransportType), 3)
	m.Primary.check(&f, "Primary", reqPrimary)
	m.Alternate.check(&f, "Alternate", reqAlternate)
	if f.err != nil {
		return b, f.err
	}
	b, p := grow(b, BodyLen)
	put32(p, reqLocalCommID, m.LocalCommID)
	put32(p, reqVendorID, m.VendorID)
	put64(p, reqServiceID, uint64(m.ServiceID))
	put64(p, reqLocalCAGUID, m.LocalCAGUID)
	put32(p, reqLocalQKey, m.LocalQKey)
	put24(p, reqLocalQPN, m.LocalQPN)
	p[reqRespRes] = m.ResponderResources
	put24(p, reqLocalEECN, m.LocalEECN)
	p[reqInitDepth] = m.InitiatorDepth
	put24(p, reqRemoteEECN, m.RemoteEECN)
	p[reqByte43] = m.RemoteCMResponseTimeout<<3 | uint8(m.TransportServiceType)<<1 | bit(m.EndToEndFlowControl, 0)
	put24(p, reqStartingPSN, m.StartingPSN)
	p[reqByte47] = m.LocalCMResponseTimeout<<3 | m.RetryCount
	put16(p, reqPKey, m.PKey)
	p[reqByte50] = uint8(m.PathMTU)<<4 | bit(m.RDCExists, 3) | m.RNRRetryCount
	p[reqByte51] = m.MaxCMRetries<<4 | bit(m.SRQ, 3) | m.ExtendedTransportType
	m.Primary.encode(p[reqPrimary : reqPrimary+pathLen])
	m.Alternate.encode(p[reqAlternate : reqAlternate+pathLen])
	p[reqSAP] |= bit(m.SAPSupported, 2)
	copy(p[reqPrivateData:], m.PrivateData[:])
	return b, nil
}

// CMAHeader parses the rdma_cm header at the start of the REQ's private
// data and returns it with the 56 bytes that follow, the application's
// private data (aliasing m.PrivateData).
func (m *REQ) CMAHeader() (CMAHeader, []byte, error) {
	return ParseCMAHeader(m.PrivateData[:])
}

// SetCMAPrivateData fills the REQ's private data as rdma_cm does: h, then
// the application's data (at most 56 bytes), then zeros.
func (m *REQ) SetCMAPrivateData(h *CMAHeader, data []byte) error {
	return setCMAPrivateData(m.PrivateData[:], h, data)
}
