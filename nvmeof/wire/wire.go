// Package wire holds the formats NVMe over Fabrics puts on an RDMA
// connection, as NVMe 1.4 and NVMe over Fabrics 1.1 define them and
// Linux's nvme-rdma and nvmet-rdma send them: submission queue entries
// (64-byte command capsules, with SGL descriptors), completion queue
// entries (16-byte response capsules), the Fabrics commands (Connect and
// its 1024-byte data, Property Get and Set, Disconnect) and the RDMA
// transport's private data in rdma_cm's connection request, accept and
// reject. It has no state and does no I/O; all fields are little-endian
// on the wire, as NVMe's are.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes.
const (
	CommandLen     = 64   // a submission queue entry: the command capsule without data
	CompletionLen  = 16   // a completion queue entry: the response capsule
	SGLLen         = 16   // an SGL descriptor
	ConnectDataLen = 1024 // the data of a Fabrics Connect command
	NQNLen         = 256  // an NVMe Qualified Name's field, NUL-padded
	CMReqLen       = 32   // the RDMA transport's private data in a connection request
	CMRepLen       = 32   // in an accept
	CMRejLen       = 4    // in a reject
)

// Opcodes.
const (
	// Admin commands.
	AdminGetLogPage = 0x02
	AdminIdentify   = 0x06
	AdminAbort      = 0x08
	AdminSetFeature = 0x09
	AdminGetFeature = 0x0a
	AdminAsyncEvent = 0x0c
	AdminKeepAlive  = 0x18

	// NVM commands (the I/O queues).
	NVMFlush = 0x00
	NVMWrite = 0x01
	NVMRead  = 0x02

	// OpFabrics is the opcode of every Fabrics command; FCType says which.
	OpFabrics = 0x7f
)

// Fabrics command types (FCTYPE, byte 4 of a Fabrics command).
const (
	FCTypePropertySet = 0x00
	FCTypeConnect     = 0x01
	FCTypePropertyGet = 0x04
	FCTypeAuthSend    = 0x05
	FCTypeAuthRecv    = 0x06
	FCTypeDisconnect  = 0x08
)

// Controller properties (the registers Property Get and Set name by
// offset).
const (
	PropCAP  = 0x00 // Controller Capabilities, 8 bytes
	PropVS   = 0x08 // Version, 4 bytes
	PropCC   = 0x14 // Controller Configuration, 4 bytes
	PropCSTS = 0x1c // Controller Status, 4 bytes
)

// Command flags (byte 1): the PRP or SGL Data Transfer field. NVMe over
// Fabrics commands always use SGLs; Linux's host sets PSDTSGLMeta.
const (
	PSDTMask    = 0xc0
	PSDTSGLMeta = 0x40 // SGLs, the metadata pointer a buffer
	PSDTSGLSeg  = 0x80 // SGLs, the metadata pointer a segment
)

// ErrShort is a buffer too short for the format it should hold.
var ErrShort = errors.New("nvmeof/wire: too short")

// Command is a submission queue entry. NSID is bytes 4-7; for a Fabrics
// command (Opcode OpFabrics) byte 4 is instead its FCType, and NSID is
// left zero. CDW holds command dwords 10 to 15.
type Command struct {
	Opcode uint8
	Flags  uint8 // FUSE and PSDT
	CID    uint16
	NSID   uint32
	FCType uint8 // Fabrics commands only
	MPTR   uint64
	SGL    SGL
	CDW    [6]uint32
}

// ParseCommand reads a submission queue entry from the first CommandLen
// bytes of b.
func ParseCommand(b []byte) (Command, error) {
	if len(b) < CommandLen {
		return Command{}, fmt.Errorf("%w: %d bytes for a command", ErrShort, len(b))
	}
	c := Command{Opcode: b[0], Flags: b[1], CID: binary.LittleEndian.Uint16(b[2:]),
		MPTR: binary.LittleEndian.Uint64(b[16:])}
	if c.Opcode == OpFabrics {
		c.FCType = b[4]
	} else {
		c.NSID = binary.LittleEndian.Uint32(b[4:])
	}
	c.SGL = ParseSGL(b[24:40])
	for i := range c.CDW {
		c.CDW[i] = binary.LittleEndian.Uint32(b[40+4*i:])
	}
	return c, nil
}

// Put writes the command into the first CommandLen bytes of b.
func (c *Command) Put(b []byte) {
	_ = b[CommandLen-1]
	clear(b[:CommandLen])
	b[0], b[1] = c.Opcode, c.Flags
	binary.LittleEndian.PutUint16(b[2:], c.CID)
	if c.Opcode == OpFabrics {
		b[4] = c.FCType
	} else {
		binary.LittleEndian.PutUint32(b[4:], c.NSID)
	}
	binary.LittleEndian.PutUint64(b[16:], c.MPTR)
	c.SGL.Put(b[24:40])
	for i, v := range c.CDW {
		binary.LittleEndian.PutUint32(b[40+4*i:], v)
	}
}

// Connect's fields (in CDW10 to CDW12).

// ConnectQID is the queue a Connect command creates (0: the admin queue).
func (c *Command) ConnectQID() uint16 { return uint16(c.CDW[0] >> 16) }

// ConnectSQSize is the 0-based size of the submission queue it asks for.
func (c *Command) ConnectSQSize() uint16 { return uint16(c.CDW[1]) }

// ConnectKATO is the keep-alive timeout it asks for, in milliseconds.
func (c *Command) ConnectKATO() uint32 { return c.CDW[2] }

// NewConnect builds a Fabrics Connect command for queue qid, its
// submission queue of sqsize entries (0-based) and a keep-alive timeout
// in milliseconds; its data (a ConnectData) goes where sgl points.
func NewConnect(cid, qid, sqsize uint16, kato uint32, sgl SGL) Command {
	return Command{Opcode: OpFabrics, Flags: PSDTSGLMeta, CID: cid, FCType: FCTypeConnect, SGL: sgl,
		CDW: [6]uint32{uint32(qid) << 16, uint32(sqsize), kato}}
}

// Property Get and Set's fields: CDW10's attribute (the size, 0 for 4
// bytes and 1 for 8), CDW11's offset, and Set's value in CDW12-13.

// PropertySize is the size in bytes of the property a Property Get or
// Set names.
func (c *Command) PropertySize() int {
	if c.CDW[0]&7 == 1 {
		return 8
	}
	return 4
}

// PropertyOffset is the offset of the property.
func (c *Command) PropertyOffset() uint32 { return c.CDW[1] }

// PropertyValue is the value a Property Set writes.
func (c *Command) PropertyValue() uint64 { return uint64(c.CDW[2]) | uint64(c.CDW[3])<<32 }

// NewPropertyGet builds a Property Get of the size-byte property at off.
func NewPropertyGet(cid uint16, off uint32, size int) Command {
	c := Command{Opcode: OpFabrics, Flags: PSDTSGLMeta, CID: cid, FCType: FCTypePropertyGet}
	c.CDW[1] = off
	if size == 8 {
		c.CDW[0] = 1
	}
	return c
}

// NewPropertySet builds a Property Set of the size-byte property at off.
func NewPropertySet(cid uint16, off uint32, size int, v uint64) Command {
	c := NewPropertyGet(cid, off, size)
	c.FCType = FCTypePropertySet
	c.CDW[2], c.CDW[3] = uint32(v), uint32(v>>32)
	return c
}

// I/O commands' fields: the starting LBA in CDW10-11, the 0-based number
// of blocks in CDW12's low 16 bits.

// SLBA is a Read's or Write's starting logical block.
func (c *Command) SLBA() uint64 { return uint64(c.CDW[0]) | uint64(c.CDW[1])<<32 }

// NLB is the number of logical blocks it moves (CDW12's 0-based count,
// plus one).
func (c *Command) NLB() int { return int(c.CDW[2]&0xffff) + 1 }

// NewIO builds a Read or Write (op) of n blocks from slba on namespace
// nsid, its data where sgl says.
func NewIO(op uint8, cid uint16, nsid uint32, slba uint64, n int, sgl SGL) Command {
	return Command{Opcode: op, Flags: PSDTSGLMeta, CID: cid, NSID: nsid, SGL: sgl,
		CDW: [6]uint32{uint32(slba), uint32(slba >> 32), uint32(n-1) & 0xffff}}
}

// Completion is a completion queue entry. Status holds the phase tag
// (bit 0), the status code (bits 1-8), its type (bits 9-11), More (bit
// 14) and Do Not Retry (bit 15).
type Completion struct {
	Result uint64 // command specific: Property Get's value, Connect's controller ID
	SQHead uint16
	SQID   uint16
	CID    uint16
	Status uint16
}

// ParseCompletion reads a completion queue entry from the first
// CompletionLen bytes of b.
func ParseCompletion(b []byte) (Completion, error) {
	if len(b) < CompletionLen {
		return Completion{}, fmt.Errorf("%w: %d bytes for a completion", ErrShort, len(b))
	}
	return Completion{Result: binary.LittleEndian.Uint64(b), SQHead: binary.LittleEndian.Uint16(b[8:]),
		SQID: binary.LittleEndian.Uint16(b[10:]), CID: binary.LittleEndian.Uint16(b[12:]),
		Status: binary.LittleEndian.Uint16(b[14:])}, nil
}

// Put writes the completion into the first CompletionLen bytes of b.
func (c *Completion) Put(b []byte) {
	binary.LittleEndian.PutUint64(b, c.Result)
	binary.LittleEndian.PutUint16(b[8:], c.SQHead)
	binary.LittleEndian.PutUint16(b[10:], c.SQID)
	binary.LittleEndian.PutUint16(b[12:], c.CID)
	binary.LittleEndian.PutUint16(b[14:], c.Status)
}

// StatusCode is the status code, without the phase tag and the status
// code type.
func (c *Completion) StatusCode() uint8 { return uint8(c.Status >> 1) }

// StatusType is the status code type (0 generic, 1 command specific, 2
// media and data integrity errors, 3 path related).
func (c *Completion) StatusType() uint8 { return uint8(c.Status>>9) & 7 }

// OK reports whether the command succeeded.
func (c *Completion) OK() bool { return c.Status>>1&0x7ff == 0 }

// SGL descriptor types (byte 15's upper nibble) and subtypes (its lower
// nibble).
const (
	SGLDataBlock  = 0x0 // data in the capsule (subtype SGLOffset) or at an address
	SGLKeyedBlock = 0x4 // data in the host's memory, named by address and key

	SGLAddress    = 0x0 // the address is an address
	SGLOffset     = 0x1 // the address is an offset into the capsule's data
	SGLInvalidate = 0xf // keyed: the target is to invalidate the key (SEND_WITH_INVALIDATE)
)

// SGL is an SGL descriptor: a keyed data block (Type SGLKeyedBlock: Addr,
// Length of at most 2^24-1, Key) or a data block in the capsule (Type
// SGLDataBlock, Subtype SGLOffset: Addr is the offset into the capsule's
// data).
type SGL struct {
	Addr    uint64
	Length  uint32
	Key     uint32
	Type    uint8
	Subtype uint8
}

// ParseSGL reads an SGL descriptor from the first SGLLen bytes of b.
func ParseSGL(b []byte) SGL {
	s := SGL{Addr: binary.LittleEndian.Uint64(b), Type: b[15] >> 4, Subtype: b[15] & 0xf}
	if s.Type == SGLKeyedBlock {
		s.Length = uint32(b[8]) | uint32(b[9])<<8 | uint32(b[10])<<16
		s.Key = binary.LittleEndian.Uint32(b[11:])
	} else {
		s.Length = binary.LittleEndian.Uint32(b[8:])
	}
	return s
}

// Put writes the descriptor into the first SGLLen bytes of b.
func (s *SGL) Put(b []byte) {
	clear(b[:SGLLen])
	binary.LittleEndian.PutUint64(b, s.Addr)
	if s.Type == SGLKeyedBlock {
		b[8], b[9], b[10] = byte(s.Length), byte(s.Length>>8), byte(s.Length>>16)
		binary.LittleEndian.PutUint32(b[11:], s.Key)
	} else {
		binary.LittleEndian.PutUint32(b[8:], s.Length)
	}
	b[15] = s.Type<<4 | s.Subtype&0xf
}

// Keyed returns a keyed data block descriptor for length bytes at addr
// in the region of key; with invalidate, the target is asked to
// invalidate the key when it answers.
func Keyed(addr uint64, length, key uint32, invalidate bool) SGL {
	s := SGL{Addr: addr, Length: length & 0xffffff, Key: key, Type: SGLKeyedBlock}
	if invalidate {
		s.Subtype = SGLInvalidate
	}
	return s
}

// InCapsule returns a descriptor for length bytes of data in the
// capsule, at offset off from the end of the command.
func InCapsule(off uint64, length uint32) SGL {
	return SGL{Addr: off, Length: length, Type: SGLDataBlock, Subtype: SGLOffset}
}

// ConnectData is the data of a Fabrics Connect command: who connects,
// to which subsystem, on which controller.
type ConnectData struct {
	HostID  [16]byte
	CNTLID  uint16 // 0xffff on the admin queue: any controller (the dynamic model)
	SubNQN  string
	HostNQN string
}

// ParseConnectData reads a Connect command's data from the first
// ConnectDataLen bytes of b. The NQNs end at their first NUL, or after
// 255 bytes (the field keeps a NUL).
func ParseConnectData(b []byte) (ConnectData, error) {
	if len(b) < ConnectDataLen {
		return ConnectData{}, fmt.Errorf("%w: %d bytes of Connect data", ErrShort, len(b))
	}
	d := ConnectData{CNTLID: binary.LittleEndian.Uint16(b[16:]), SubNQN: cstring(b[256 : 256+NQNLen-1]), HostNQN: cstring(b[512 : 512+NQNLen-1])}
	copy(d.HostID[:], b[:16])
	return d, nil
}

// Put writes the data into the first ConnectDataLen bytes of b. An NQN
// longer than 255 bytes is cut there (the field keeps a NUL).
func (d *ConnectData) Put(b []byte) {
	clear(b[:ConnectDataLen])
	copy(b, d.HostID[:])
	binary.LittleEndian.PutUint16(b[16:], d.CNTLID)
	copy(b[256:256+NQNLen-1], d.SubNQN)
	copy(b[512:512+NQNLen-1], d.HostNQN)
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// CMReq is the RDMA transport's private data in a connection request:
// which queue the connection carries and its sizes.
type CMReq struct {
	RecFmt  uint16 // 0
	QID     uint16 // 0: the admin queue
	HRQSize uint16 // the host's receive queue size
	HSQSize uint16 // the host's submission queue size (0-based)
	CNTLID  uint16
}

// ParseCMReq reads a request's private data.
func ParseCMReq(b []byte) (CMReq, error) {
	if len(b) < CMReqLen {
		return CMReq{}, fmt.Errorf("%w: %d bytes of request private data", ErrShort, len(b))
	}
	le := binary.LittleEndian
	return CMReq{RecFmt: le.Uint16(b), QID: le.Uint16(b[2:]), HRQSize: le.Uint16(b[4:]), HSQSize: le.Uint16(b[6:]),
		CNTLID: le.Uint16(b[8:])}, nil
}

// Bytes returns the private data.
func (r CMReq) Bytes() []byte {
	b := make([]byte, CMReqLen)
	le := binary.LittleEndian
	le.PutUint16(b, r.RecFmt)
	le.PutUint16(b[2:], r.QID)
	le.PutUint16(b[4:], r.HRQSize)
	le.PutUint16(b[6:], r.HSQSize)
	le.PutUint16(b[8:], r.CNTLID)
	return b
}

// CMRep is the private data of an accept: the controller's receive
// queue size.
type CMRep struct {
	RecFmt  uint16
	CRQSize uint16
}

// ParseCMRep reads an accept's private data.
func ParseCMRep(b []byte) (CMRep, error) {
	if len(b) < 4 {
		return CMRep{}, fmt.Errorf("%w: %d bytes of accept private data", ErrShort, len(b))
	}
	return CMRep{RecFmt: binary.LittleEndian.Uint16(b), CRQSize: binary.LittleEndian.Uint16(b[2:])}, nil
}

// Bytes returns the private data.
func (r CMRep) Bytes() []byte {
	b := make([]byte, CMRepLen)
	binary.LittleEndian.PutUint16(b, r.RecFmt)
	binary.LittleEndian.PutUint16(b[2:], r.CRQSize)
	return b
}

// Reject statuses of the RDMA transport (in a reject's private data).
const (
	RejInvalidLength  = 0x01
	RejInvalidRecFmt  = 0x02
	RejInvalidQID     = 0x03
	RejInvalidHSQSize = 0x04
	RejInvalidHRQSize = 0x05
	RejNoResources    = 0x06
	RejInvalidIRD     = 0x07
	RejInvalidORD     = 0x08
)

// CMRej is the private data of a reject: why.
type CMRej struct {
	RecFmt uint16
	Status uint16
}

// ParseCMRej reads a reject's private data.
func ParseCMRej(b []byte) (CMRej, error) {
	if len(b) < CMRejLen {
		return CMRej{}, fmt.Errorf("%w: %d bytes of reject private data", ErrShort, len(b))
	}
	return CMRej{RecFmt: binary.LittleEndian.Uint16(b), Status: binary.LittleEndian.Uint16(b[2:])}, nil
}

// Bytes returns the private data.
func (r CMRej) Bytes() []byte {
	b := make([]byte, CMRejLen)
	binary.LittleEndian.PutUint16(b, r.RecFmt)
	binary.LittleEndian.PutUint16(b[2:], r.Status)
	return b
}
