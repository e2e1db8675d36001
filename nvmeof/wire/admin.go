package wire

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Status code types (bits 9-11 of a completion's Status) and the status
// codes this package's users answer with.
const (
	SCTGeneric         = 0
	SCTCommandSpecific = 1
	SCTMedia           = 2

	// Generic.
	SCSuccess          = 0x00
	SCInvalidOpcode    = 0x01
	SCInvalidField     = 0x02
	SCCIDConflict      = 0x03
	SCDataXferError    = 0x04
	SCInternal         = 0x06
	SCAbortRequested   = 0x07
	SCSGLInvalidType   = 0x11
	SCSGLInvalidOffset = 0x16
	SCInvalidNamespace = 0x0b
	SCCommandSeqError  = 0x0c
	SCLBARange         = 0x80
	SCCapacityExceeded = 0x81

	// Command specific, of Fabrics Connect.
	SCConnectIncompatibleFormat = 0x80
	SCConnectControllerBusy     = 0x81
	SCConnectInvalidParam       = 0x82
	SCConnectRestartDiscovery   = 0x83
	SCConnectInvalidHost        = 0x84

	// Media and data integrity errors.
	SCWriteFault      = 0x80
	SCUnrecoveredRead = 0x81
)

// StatusDNR is the Do Not Retry bit of a completion's Status.
const StatusDNR = 1 << 15

// Status returns a completion's Status field for status code sc of type
// sct, with Do Not Retry set when dnr (the phase tag is left 0: it has
// no meaning on a fabric).
func Status(sct, sc uint8, dnr bool) uint16 {
	s := uint16(sct&7)<<9 | uint16(sc)<<1
	if dnr {
		s |= StatusDNR
	}
	return s
}

// StatusError is a command's failure, as its completion reported it.
type StatusError struct {
	Opcode uint8
	Status uint16
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvmeof: command 0x%02x failed: %s", e.Opcode, StatusString(e.Status))
}

// StatusString names a completion's status (type and code).
func StatusString(status uint16) string {
	sct, sc := uint8(status>>9)&7, uint8(status>>1)
	name := ""
	switch sct {
	case SCTGeneric:
		name = map[uint8]string{SCSuccess: "success", SCInvalidOpcode: "invalid opcode", SCInvalidField: "invalid field",
			SCCIDConflict: "command ID conflict", SCDataXferError: "data transfer error", SCInternal: "internal error",
			SCAbortRequested: "aborted", SCSGLInvalidType: "SGL descriptor type invalid",
			SCSGLInvalidOffset: "SGL offset invalid", SCInvalidNamespace: "invalid namespace or format",
			SCCommandSeqError: "command sequence error", SCLBARange: "LBA out of range",
			SCCapacityExceeded: "capacity exceeded"}[sc]
	case SCTCommandSpecific:
		name = map[uint8]string{SCConnectIncompatibleFormat: "incompatible format", SCConnectControllerBusy: "controller busy",
			SCConnectInvalidParam: "invalid connect parameters", SCConnectRestartDiscovery: "restart discovery",
			SCConnectInvalidHost: "invalid host"}[sc]
	case SCTMedia:
		name = map[uint8]string{SCWriteFault: "write fault", SCUnrecoveredRead: "unrecovered read error"}[sc]
	}
	if name == "" {
		name = "unknown"
	}
	return fmt.Sprintf("%s (type %d, code 0x%02x)", name, sct, sc)
}

// Feature identifiers (Set and Get Features' CDW10 bits 0-7).
const (
	FeatArbitration     = 0x01
	FeatPowerMgmt       = 0x02
	FeatVolatileWC      = 0x06
	FeatNumQueues       = 0x07
	FeatIRQCoalesce     = 0x08
	FeatAsyncEventCfg   = 0x0b
	FeatKeepAliveTimer  = 0x0f
	FeatHostIdentifier  = 0x81
	FeatWriteAtomicNorm = 0x0a
)

// Identify's CNS values (CDW10 bits 0-7): which structure it returns.
const (
	CNSNamespace       = 0x00
	CNSController      = 0x01
	CNSActiveNSList    = 0x02
	CNSNSDescList      = 0x03
	CNSNamespaceCSI    = 0x05 // I/O command set specific namespace
	CNSControllerCSI   = 0x06 // I/O command set specific controller
	IdentifyLen        = 4096
	DiscoveryHeaderLen = 1024
	DiscoveryEntryLen  = 1024
)

// Log pages (Get Log Page's CDW10 bits 0-7).
const (
	LogError     = 0x01
	LogSMART     = 0x02
	LogFirmware  = 0x03
	LogChangedNS = 0x04
	LogDiscovery = 0x70
)

// DiscoveryNQN is the well-known NQN of discovery controllers.
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// Register fields: CAP, CC and CSTS.
const (
	CCEnable       = 1 << 0
	CCShutdownMask = 3 << 14
	CSTSReady      = 1 << 0
	CSTSFatal      = 1 << 1
	CSTSShutdown   = 2 << 2 // shutdown processing complete
	CAPCSSNVM      = 1 << 37
)

// CAP returns a Controller Capabilities register: queues of up to mqes+1
// entries, contiguous queues required, a timeout of to×500 ms, the NVM
// command set and 4 KiB pages.
func CAP(mqes uint16, to uint8) uint64 {
	return uint64(mqes) | 1<<16 | uint64(to)<<24 | CAPCSSNVM
}

// CAPMQES is the 0-based maximum queue size of a CAP register.
func CAPMQES(cap uint64) uint16 { return uint16(cap) }

// Version returns a VS register's value for version maj.min.ter.
func Version(maj, min, ter uint8) uint32 {
	return uint32(maj)<<16 | uint32(min)<<8 | uint32(ter)
}

// Controller types (Identify Controller's CNTRLTYPE).
const (
	ControllerIO        = 1
	ControllerDiscovery = 2
	ControllerAdmin     = 3
)

// SGLS bits of Identify Controller: which SGLs a controller takes.
const (
	SGLSSupported = 1 << 0  // SGLs, without alignment needs
	SGLSKeyed     = 1 << 2  // keyed SGL data blocks
	SGLSOffset    = 1 << 20 // in-capsule data named by offset
)

// Controller is the part of the Identify Controller data structure
// (CNS 01h) that a fabric host and target use; Put leaves the rest zero.
type Controller struct {
	VID          uint16
	SSVID        uint16
	Serial       string // SN, 20 ASCII bytes, space padded
	Model        string // MN, 40
	Firmware     string // FR, 8
	MDTS         uint8  // maximum transfer: 2^MDTS pages of 4 KiB (0: no limit)
	CNTLID       uint16
	Version      uint32
	CtrlType     uint8
	OACS         uint16
	ACL          uint8
	AERL         uint8
	LPA          uint8
	KAS          uint16 // keep-alive granularity in 100 ms units
	SQES, CQES   uint8
	MaxCmd       uint16
	NN           uint32 // highest namespace ID
	ONCS         uint16
	VWC          uint8
	SGLS         uint32
	SubNQN       string
	IOCCSZ       uint32 // I/O command capsule size in 16-byte units
	IORCSZ       uint32 // I/O response capsule size in 16-byte units
	ICDOFF       uint16
	CtrlAttrs    uint8 // FCATT
	MSDBD        uint8 // SGL data block descriptors a command may carry
	MaxNSAttach  uint32
	OAES, CTRATT uint32
}

// InlineDataSize is how many bytes of data an I/O command capsule may
// carry after its 64-byte command.
func (c *Controller) InlineDataSize() int {
	if c.IOCCSZ*16 <= CommandLen {
		return 0
	}
	return int(c.IOCCSZ*16) - CommandLen
}

// Put writes the structure into the first IdentifyLen bytes of b.
func (c *Controller) Put(b []byte) {
	_ = b[IdentifyLen-1]
	clear(b[:IdentifyLen])
	le := binary.LittleEndian
	le.PutUint16(b[0:], c.VID)
	le.PutUint16(b[2:], c.SSVID)
	putPadded(b[4:24], c.Serial)
	putPadded(b[24:64], c.Model)
	putPadded(b[64:72], c.Firmware)
	b[77] = c.MDTS
	le.PutUint16(b[78:], c.CNTLID)
	le.PutUint32(b[80:], c.Version)
	le.PutUint32(b[92:], c.OAES)
	le.PutUint32(b[96:], c.CTRATT)
	b[111] = c.CtrlType
	le.PutUint16(b[256:], c.OACS)
	b[258], b[259], b[261] = c.ACL, c.AERL, c.LPA
	le.PutUint16(b[320:], c.KAS)
	b[512], b[513] = c.SQES, c.CQES
	le.PutUint16(b[514:], c.MaxCmd)
	le.PutUint32(b[516:], c.NN)
	le.PutUint16(b[520:], c.ONCS)
	b[525] = c.VWC
	le.PutUint32(b[536:], c.SGLS)
	le.PutUint32(b[540:], c.MaxNSAttach)
	copy(b[768:768+NQNLen-1], c.SubNQN)
	le.PutUint32(b[1792:], c.IOCCSZ)
	le.PutUint32(b[1796:], c.IORCSZ)
	le.PutUint16(b[1800:], c.ICDOFF)
	b[1802], b[1803] = c.CtrlAttrs, c.MSDBD
}

// ParseController reads an Identify Controller data structure.
func ParseController(b []byte) (Controller, error) {
	if len(b) < IdentifyLen {
		return Controller{}, fmt.Errorf("%w: %d bytes of Identify Controller", ErrShort, len(b))
	}
	le := binary.LittleEndian
	return Controller{
		VID: le.Uint16(b[0:]), SSVID: le.Uint16(b[2:]),
		Serial: trimPadded(b[4:24]), Model: trimPadded(b[24:64]), Firmware: trimPadded(b[64:72]),
		MDTS: b[77], CNTLID: le.Uint16(b[78:]), Version: le.Uint32(b[80:]),
		OAES: le.Uint32(b[92:]), CTRATT: le.Uint32(b[96:]), CtrlType: b[111],
		OACS: le.Uint16(b[256:]), ACL: b[258], AERL: b[259], LPA: b[261], KAS: le.Uint16(b[320:]),
		SQES: b[512], CQES: b[513], MaxCmd: le.Uint16(b[514:]), NN: le.Uint32(b[516:]),
		ONCS: le.Uint16(b[520:]), VWC: b[525], SGLS: le.Uint32(b[536:]), MaxNSAttach: le.Uint32(b[540:]),
		SubNQN: cstring(b[768 : 768+NQNLen]),
		IOCCSZ: le.Uint32(b[1792:]), IORCSZ: le.Uint32(b[1796:]), ICDOFF: le.Uint16(b[1800:]),
		CtrlAttrs: b[1802], MSDBD: b[1803],
	}, nil
}

// Namespace is the part of the Identify Namespace data structure (CNS
// 00h) for a namespace of one LBA format without metadata.
type Namespace struct {
	Size     uint64 // NSZE, in blocks
	Capacity uint64 // NCAP
	Used     uint64 // NUSE
	NSFeat   uint8
	NMIC     uint8
	NGUID    [16]byte
	LBAShift uint8 // LBADS of the format in use: a block is 1<<LBAShift bytes
}

// BlockSize is the namespace's block size in bytes.
func (n *Namespace) BlockSize() int { return 1 << n.LBAShift }

// Put writes the structure into the first IdentifyLen bytes of b.
func (n *Namespace) Put(b []byte) {
	_ = b[IdentifyLen-1]
	clear(b[:IdentifyLen])
	le := binary.LittleEndian
	le.PutUint64(b[0:], n.Size)
	le.PutUint64(b[8:], n.Capacity)
	le.PutUint64(b[16:], n.Used)
	b[24] = n.NSFeat
	b[25] = 0 // NLBAF: one format (0-based)
	b[26] = 0 // FLBAS: format 0, no metadata
	b[30] = n.NMIC
	copy(b[104:120], n.NGUID[:])
	b[128+2] = n.LBAShift // LBAF0: MS 0, LBADS, RP 0
}

// ParseNamespace reads an Identify Namespace data structure, taking the
// block size of the LBA format FLBAS names.
func ParseNamespace(b []byte) (Namespace, error) {
	if len(b) < IdentifyLen {
		return Namespace{}, fmt.Errorf("%w: %d bytes of Identify Namespace", ErrShort, len(b))
	}
	le := binary.LittleEndian
	n := Namespace{Size: le.Uint64(b[0:]), Capacity: le.Uint64(b[8:]), Used: le.Uint64(b[16:]), NSFeat: b[24], NMIC: b[30]}
	copy(n.NGUID[:], b[104:120])
	f := int(b[26] & 0xf)
	n.LBAShift = b[128+4*f+2]
	return n, nil
}

// Namespace identification descriptor types (Identify CNS 03h).
const (
	NIDTEUI64 = 1
	NIDTNGUID = 2
	NIDTUUID  = 3
)

// PutNSDescriptors writes a namespace identification descriptor list
// holding one NGUID descriptor for nguid into the first IdentifyLen
// bytes of b.
func PutNSDescriptors(b []byte, nguid [16]byte) {
	clear(b[:IdentifyLen])
	b[0], b[1] = NIDTNGUID, 16
	copy(b[4:20], nguid[:])
}

// ParseNSList reads an active namespace ID list (Identify CNS 02h): the
// IDs before the first zero.
func ParseNSList(b []byte) []uint32 {
	var ids []uint32
	for i := 0; i+4 <= len(b); i += 4 {
		id := binary.LittleEndian.Uint32(b[i:])
		if id == 0 {
			break
		}
		ids = append(ids, id)
	}
	return ids
}

// Transport types, address families and subsystem types of a discovery
// log entry.
const (
	TrTypeRDMA = 1
	TrTypeTCP  = 3

	AdrFamIPv4 = 1
	AdrFamIPv6 = 2

	SubTypeDiscovery = 1 // a referral to another discovery controller
	SubTypeNVMe      = 2

	// TREQ: secure channel not specified; the host may skip SQ flow
	// control (bit 2: SQ head pointer updates are not required).
	TReqNotSpecified = 0
	TReqNoSQFlow     = 1 << 2

	// The RDMA transport specific address subtype (TSAS).
	RDMAQPTypeConnected   = 1
	RDMAPRTypeNotSpecfied = 1
	RDMACMSRdmaCM         = 1
)

// DiscoveryEntry is one entry of the discovery log page: a subsystem
// and how to reach it.
type DiscoveryEntry struct {
	TrType  uint8
	AdrFam  uint8
	SubType uint8
	TReq    uint8
	PortID  uint16
	CNTLID  uint16
	ASQSZ   uint16
	TrSvcID string // the port, as ASCII ("4420")
	SubNQN  string
	TrAddr  string // the address, as ASCII ("10.77.0.11")
	// RDMA's TSAS.
	QPType, PRType, CMS uint8
	PKey                uint16
}

// Put writes the entry into the first DiscoveryEntryLen bytes of b.
func (e *DiscoveryEntry) Put(b []byte) {
	_ = b[DiscoveryEntryLen-1]
	clear(b[:DiscoveryEntryLen])
	le := binary.LittleEndian
	b[0], b[1], b[2], b[3] = e.TrType, e.AdrFam, e.SubType, e.TReq
	le.PutUint16(b[4:], e.PortID)
	le.PutUint16(b[6:], e.CNTLID)
	le.PutUint16(b[8:], e.ASQSZ)
	putPadded(b[32:64], e.TrSvcID)
	copy(b[256:256+NQNLen-1], e.SubNQN)
	putPadded(b[512:768], e.TrAddr)
	b[768], b[769], b[770] = e.QPType, e.PRType, e.CMS
	le.PutUint16(b[776:], e.PKey)
}

// ParseDiscoveryEntry reads an entry.
func ParseDiscoveryEntry(b []byte) (DiscoveryEntry, error) {
	if len(b) < DiscoveryEntryLen {
		return DiscoveryEntry{}, fmt.Errorf("%w: %d bytes of a discovery log entry", ErrShort, len(b))
	}
	le := binary.LittleEndian
	return DiscoveryEntry{TrType: b[0], AdrFam: b[1], SubType: b[2], TReq: b[3], PortID: le.Uint16(b[4:]),
		CNTLID: le.Uint16(b[6:]), ASQSZ: le.Uint16(b[8:]), TrSvcID: trimPadded(b[32:64]),
		SubNQN: cstring(b[256 : 256+NQNLen]), TrAddr: trimPadded(b[512:768]),
		QPType: b[768], PRType: b[769], CMS: b[770], PKey: le.Uint16(b[776:])}, nil
}

// DiscoveryHeader is the discovery log page's header: a generation
// counter that changes with the page, and the number of entries.
type DiscoveryHeader struct {
	GenCtr uint64
	NumRec uint64
	RecFmt uint16
}

// Put writes the header into the first DiscoveryHeaderLen bytes of b.
func (h *DiscoveryHeader) Put(b []byte) {
	_ = b[DiscoveryHeaderLen-1]
	clear(b[:DiscoveryHeaderLen])
	binary.LittleEndian.PutUint64(b, h.GenCtr)
	binary.LittleEndian.PutUint64(b[8:], h.NumRec)
	binary.LittleEndian.PutUint16(b[16:], h.RecFmt)
}

// ParseDiscoveryHeader reads the header.
func ParseDiscoveryHeader(b []byte) (DiscoveryHeader, error) {
	if len(b) < 18 {
		return DiscoveryHeader{}, fmt.Errorf("%w: %d bytes of a discovery log header", ErrShort, len(b))
	}
	return DiscoveryHeader{GenCtr: binary.LittleEndian.Uint64(b), NumRec: binary.LittleEndian.Uint64(b[8:]),
		RecFmt: binary.LittleEndian.Uint16(b[16:])}, nil
}

// Admin command builders and fields.

// NewIdentify builds an Identify of structure cns for namespace nsid, its
// 4 KiB of data where sgl points.
func NewIdentify(cid uint16, cns uint8, nsid uint32, sgl SGL) Command {
	return Command{Opcode: AdminIdentify, Flags: PSDTSGLMeta, CID: cid, NSID: nsid, SGL: sgl, CDW: [6]uint32{uint32(cns)}}
}

// CNS is an Identify's structure selector.
func (c *Command) CNS() uint8 { return uint8(c.CDW[0]) }

// NewGetLogPage builds a Get Log Page of n bytes (a multiple of 4) of log
// lid from byte offset off.
func NewGetLogPage(cid uint16, lid uint8, nsid uint32, off uint64, n int, sgl SGL) Command {
	numd := uint32(n/4 - 1)
	return Command{Opcode: AdminGetLogPage, Flags: PSDTSGLMeta, CID: cid, NSID: nsid, SGL: sgl,
		CDW: [6]uint32{uint32(lid) | numd<<16, numd >> 16, uint32(off), uint32(off >> 32)}}
}

// LogPage returns a Get Log Page's log identifier, byte count and offset.
func (c *Command) LogPage() (lid uint8, n int, off uint64) {
	numd := uint64(c.CDW[0]>>16) | uint64(c.CDW[1]&0xffff)<<16
	return uint8(c.CDW[0]), int(numd+1) * 4, uint64(c.CDW[2]) | uint64(c.CDW[3])<<32
}

// NewSetFeatures builds a Set Features of feature fid with value v
// (CDW11).
func NewSetFeatures(cid uint16, fid uint8, v uint32) Command {
	return Command{Opcode: AdminSetFeature, Flags: PSDTSGLMeta, CID: cid, CDW: [6]uint32{uint32(fid), v}}
}

// FeatureID is a Set or Get Features' feature.
func (c *Command) FeatureID() uint8 { return uint8(c.CDW[0]) }

// NewKeepAlive builds a Keep Alive.
func NewKeepAlive(cid uint16) Command {
	return Command{Opcode: AdminKeepAlive, Flags: PSDTSGLMeta, CID: cid}
}

// NewFlush builds a Flush of namespace nsid.
func NewFlush(cid uint16, nsid uint32) Command {
	return Command{Opcode: NVMFlush, Flags: PSDTSGLMeta, CID: cid, NSID: nsid}
}

// NewDisconnect builds a Fabrics Disconnect of the queue it is sent on.
func NewDisconnect(cid uint16) Command {
	return Command{Opcode: OpFabrics, Flags: PSDTSGLMeta, CID: cid, FCType: FCTypeDisconnect}
}

func putPadded(b []byte, s string) {
	for i := range b {
		b[i] = ' '
	}
	copy(b, s)
}

func trimPadded(b []byte) string {
	return strings.TrimRight(cstring(b), " ")
}
