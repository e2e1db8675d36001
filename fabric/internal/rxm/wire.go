// Package rxm holds the wire format of libfabric's ofi_rxm utility
// provider (1.17), which builds FI_EP_RDM endpoints out of connected
// MSG endpoints: its connection data and its 64-byte packet header. The
// tcp provider's FI_EP_RDM (tcp;ofi_rxm) and the verbs provider's
// (verbs;ofi_rxm) speak it.
package rxm

import (
	"encoding/binary"
	"errors"
)

// Versions and values of the connection data and packet header.
const (
	CMVersion    = 1 // RXM_CM_DATA_VERSION
	Little       = 2 // ofi_detect_endianness on little-endian hosts
	CtrlVersion  = 4 // RXM_CTRL_VERSION
	OpVersion    = 3 // RXM_OP_VERSION, as the connection data advertises it
	OpHdrVersion = 2 // OFI_OP_VERSION, as each packet's op header carries it

	FlowLocal   = 0 // RXM_CM_FLOW_CTRL_LOCAL
	FlowPeerOn  = 1 // RXM_CM_FLOW_CTRL_PEER_ON: the MSG endpoints trade credits
	FlowPeerOff = 2 // RXM_CM_FLOW_CTRL_PEER_OFF

	EagerLimit = 16384 // the largest message sent whole, and a SAR segment
	PktLen     = 64    // struct rxm_pkt without data
	RndvHdrLen = 104   // struct rxm_rndv_hdr, padded
	MaxRndvIOV = 4

	// Control types (enum rxm_ctrl_type).
	CtrlEager      = 0
	CtrlSeg        = 1
	CtrlRndvReq    = 2
	CtrlRndvRdDone = 3
	CtrlCredit     = 6

	// SAR segment types, in the low two bits of ctrl_data.
	SegFirst  = 1
	SegMiddle = 2
	SegLast   = 3

	// Operations (enum ofi_op).
	OpMsg    = 0
	OpTagged = 1

	FlagRemoteCQData = 1 << 17 // FI_REMOTE_CQ_DATA in the op header's flags
)

// Pkt is the packet header (struct rxm_pkt: ofi_ctrl_hdr, then
// ofi_op_hdr), little-endian.
type Pkt struct {
	Ctrl     uint8
	SegSize  uint16
	SegNo    uint32
	ConnID   uint64 // the receiver's index of the connection
	MsgID    uint64
	CtrlData uint64 // SAR: the segment type; credit: the credits
	Op       uint8
	Flags    uint32
	Size     uint64 // the whole message's length
	Data     uint64 // remote CQ data
	Tag      uint64
}

// Marshal writes the header into b[:PktLen].
func (p *Pkt) Marshal(b []byte) {
	clear(b[:PktLen])
	b[0] = CtrlVersion
	b[1] = p.Ctrl
	binary.LittleEndian.PutUint16(b[2:], p.SegSize)
	binary.LittleEndian.PutUint32(b[4:], p.SegNo)
	binary.LittleEndian.PutUint64(b[8:], p.ConnID)
	binary.LittleEndian.PutUint64(b[16:], p.MsgID)
	binary.LittleEndian.PutUint64(b[24:], p.CtrlData)
	b[32] = OpHdrVersion
	b[34] = p.Op
	binary.LittleEndian.PutUint32(b[36:], p.Flags)
	binary.LittleEndian.PutUint64(b[40:], p.Size)
	binary.LittleEndian.PutUint64(b[48:], p.Data)
	binary.LittleEndian.PutUint64(b[56:], p.Tag)
}

// SetConnID sets the connection index of a header marshalled into b
// (known once the connection is up).
func SetConnID(b []byte, id uint64) { binary.LittleEndian.PutUint64(b[8:], id) }

// ParsePkt reads a header; false if b is short or of another version.
func ParsePkt(b []byte) (Pkt, bool) {
	if len(b) < PktLen || b[0] != CtrlVersion {
		return Pkt{}, false
	}
	return Pkt{Ctrl: b[1], SegSize: binary.LittleEndian.Uint16(b[2:]), SegNo: binary.LittleEndian.Uint32(b[4:]),
		ConnID: binary.LittleEndian.Uint64(b[8:]), MsgID: binary.LittleEndian.Uint64(b[16:]), CtrlData: binary.LittleEndian.Uint64(b[24:]),
		Op: b[34], Flags: binary.LittleEndian.Uint32(b[36:]), Size: binary.LittleEndian.Uint64(b[40:]),
		Data: binary.LittleEndian.Uint64(b[48:]), Tag: binary.LittleEndian.Uint64(b[56:])}, true
}

// Connect is the connection request's data (union rxm_cm_data's
// connect, 24 bytes).
type Connect struct {
	Port       uint16 // the requester's listening port: its name to the peer
	Flow       uint8
	EagerLimit uint32
	RxSize     uint32
	ConnID     uint64 // pid << 32 | the requester's index of the connection
}

// Bytes lays the data out.
func (c Connect) Bytes() []byte {
	b := make([]byte, 24)
	b[0], b[1], b[2], b[3] = CMVersion, Little, CtrlVersion, OpVersion
	binary.LittleEndian.PutUint16(b[4:], c.Port)
	b[6] = c.Flow
	binary.LittleEndian.PutUint32(b[8:], c.EagerLimit)
	binary.LittleEndian.PutUint32(b[12:], c.RxSize)
	binary.LittleEndian.PutUint64(b[16:], c.ConnID)
	return b
}

// ErrRefused is a connection request that C's rxm refuses too: another
// version, endianness or eager limit.
var ErrRefused = errors.New("rxm: connect data of another version, byte order or eager limit")

// ParseConnect reads a request's data, refusing what C's
// rxm_verify_connreq refuses.
func ParseConnect(b []byte) (Connect, error) {
	if len(b) < 24 || b[0] != CMVersion || b[1] != Little || b[2] != CtrlVersion || b[3] != OpVersion ||
		binary.LittleEndian.Uint32(b[8:]) != EagerLimit {
		return Connect{}, ErrRefused
	}
	return Connect{Port: binary.LittleEndian.Uint16(b[4:]), Flow: b[6], EagerLimit: EagerLimit,
		RxSize: binary.LittleEndian.Uint32(b[12:]), ConnID: binary.LittleEndian.Uint64(b[16:])}, nil
}

// Accept is the accept's data (union rxm_cm_data's accept, 16 bytes).
type Accept struct {
	ConnID uint64 // pid << 32 | the accepter's index of the connection
	RxSize uint32
	Flow   uint8
}

// Bytes lays the data out.
func (a Accept) Bytes() []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, a.ConnID)
	binary.LittleEndian.PutUint32(b[8:], a.RxSize)
	b[12] = a.Flow
	return b
}

// ParseAccept reads an accept's data; ok is false if it is short.
func ParseAccept(b []byte) (Accept, bool) {
	if len(b) < 16 {
		return Accept{}, false
	}
	return Accept{ConnID: binary.LittleEndian.Uint64(b), RxSize: binary.LittleEndian.Uint32(b[8:]), Flow: b[12]}, true
}

// Reasons of a refusal (enum rxm_cm_reject_reason).
const (
	ReasonRefused = 1 // RXM_REJECT_ECONNREFUSED
	ReasonAlready = 2 // RXM_REJECT_EALREADY: our own request to the peer goes on
)

// Reject and RejectAlready are the data of refusals (struct
// rxm_cm_reject: version, reason).
var (
	Reject        = []byte{CMVersion, ReasonRefused}
	RejectAlready = []byte{CMVersion, ReasonAlready}
)

// IOV is one range of a rendezvous's source (struct ofi_rma_iov).
type IOV struct {
	Addr, Len, Key uint64
}

// RndvHdr lays out struct rxm_rndv_hdr: up to four ranges and their
// count, padded to RndvHdrLen.
func RndvHdr(iov []IOV) []byte {
	b := make([]byte, RndvHdrLen)
	for i, v := range iov[:min(len(iov), MaxRndvIOV)] {
		binary.LittleEndian.PutUint64(b[i*24:], v.Addr)
		binary.LittleEndian.PutUint64(b[i*24+8:], v.Len)
		binary.LittleEndian.PutUint64(b[i*24+16:], v.Key)
	}
	b[96] = byte(min(len(iov), MaxRndvIOV))
	return b
}

// ParseRndvHdr reads the ranges of a rendezvous request's body.
func ParseRndvHdr(b []byte) ([]IOV, bool) {
	if len(b) < 97 || b[96] == 0 || b[96] > MaxRndvIOV {
		return nil, false
	}
	out := make([]IOV, b[96])
	for i := range out {
		o := i * 24
		out[i] = IOV{binary.LittleEndian.Uint64(b[o:]), binary.LittleEndian.Uint64(b[o+8:]), binary.LittleEndian.Uint64(b[o+16:])}
	}
	return out, true
}
