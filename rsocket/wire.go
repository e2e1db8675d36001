package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// rsockets' wire format over RoCE and InfiniBand (librdmacm's rsocket.c,
// protocol version 1). There is no byte stream on the wire: each side
// advertises a receive ring and a two-entry target SGL array in the
// connection's private data, and every message is an RDMA WRITE WITH
// IMMEDIATE whose 32-bit immediate names what it is.

// Version is the rsockets protocol version this package speaks.
const Version = 1

// Connection data flags (RS_CONN_FLAG_*).
const (
	connFlagNet   = 0x1 // the sender is big-endian: its SGL array is written in that order
	connFlagIOMap = 0x2 // the sender has an iomap after its SGL array (always set by librdmacm)
)

// ConnDataLen is the length of struct rs_conn_data, the private data of
// an rsocket connection request and reply.
const ConnDataLen = 40

// sgeLen is the length of struct rs_sge: addr (8), key (4), length (4).
const sgeLen = 16

// sglSize is RS_SGL_SIZE, the number of entries in a target SGL array.
const sglSize = 2

// SGE is struct rs_sge: a piece of the peer's memory to write into.
type SGE struct {
	Addr   uint64
	Key    uint32
	Length uint32
}

// ConnData is struct rs_conn_data, what each side of an rsocket
// connection tells the other in the connection manager's private data.
type ConnData struct {
	Version   uint8
	Flags     uint8
	Credits   uint16 // the sender's receive queue size: how many messages it may be sent unacknowledged
	IOMapSize uint8  // target_iomap_size, scaled as rs_value_to_scale stores it
	// TargetSGL names the sender's target SGL array (its length is the
	// number of entries, 2), which the receiver writes new receive
	// buffers into.
	TargetSGL SGE
	// DataBuf is the first receive buffer: half of the sender's ring.
	DataBuf SGE
}

// BigEndian reports whether the sender keeps its SGL array big-endian
// (RS_CONN_FLAG_NET).
func (d *ConnData) BigEndian() bool { return d.Flags&connFlagNet != 0 }

// Marshal returns the 40 bytes of the connection data; every integer is
// big-endian, whatever the flags say.
func (d *ConnData) Marshal() []byte {
	b := make([]byte, ConnDataLen)
	b[0] = d.Version
	b[1] = d.Flags
	binary.BigEndian.PutUint16(b[2:], d.Credits)
	b[7] = d.IOMapSize
	putSGE(binary.BigEndian, b[8:], d.TargetSGL)
	putSGE(binary.BigEndian, b[24:], d.DataBuf)
	return b
}

// Errors ParseConnData returns.
var (
	ErrShortConnData = errors.New("rsocket: connection data shorter than 40 bytes")
	ErrVersion       = errors.New("rsocket: unsupported protocol version")
)

// ParseConnData reads connection data from the start of b, which may be
// longer (the connection manager pads private data with zeros). It
// checks the version and that the peer offers something to write into.
func ParseConnData(b []byte) (ConnData, error) {
	if len(b) < ConnDataLen {
		return ConnData{}, fmt.Errorf("%w (%d)", ErrShortConnData, len(b))
	}
	d := ConnData{
		Version:   b[0],
		Flags:     b[1],
		Credits:   binary.BigEndian.Uint16(b[2:]),
		IOMapSize: b[7],
		TargetSGL: getSGE(binary.BigEndian, b[8:]),
		DataBuf:   getSGE(binary.BigEndian, b[24:]),
	}
	switch {
	case d.Version != Version:
		return d, fmt.Errorf("%w %d (this side speaks %d)", ErrVersion, d.Version, Version)
	case d.Credits == 0:
		return d, errors.New("rsocket: the peer offers no credits")
	case d.TargetSGL.Length == 0 || d.TargetSGL.Length > 64:
		return d, fmt.Errorf("rsocket: the peer's target SGL has %d entries", d.TargetSGL.Length)
	case d.DataBuf.Length == 0:
		return d, errors.New("rsocket: the peer offers an empty receive buffer")
	}
	return d, nil
}

func putSGE(o binary.ByteOrder, b []byte, s SGE) {
	o.PutUint64(b, s.Addr)
	o.PutUint32(b[8:], s.Key)
	o.PutUint32(b[12:], s.Length)
}

func getSGE(o binary.ByteOrder, b []byte) SGE {
	return SGE{Addr: o.Uint64(b), Key: o.Uint32(b[8:]), Length: o.Uint32(b[12:])}
}

// Message operations: the top three bits of the immediate (RS_OP_*).
const (
	opData   = 0 // data: the low 29 bits are its length
	opWrite  = 2 // riowrite's local tag; never on the wire
	opSGL    = 4 // credits: the low 29 bits are the new limit of the sender's sequence
	opIOMap  = 6 // an iomap entry was written; nothing to do
	opCtrl   = 7 // control: ctrlDisconnect, ctrlKeepAlive or ctrlShutdown
	dataMask = 1<<29 - 1
)

// Control messages (RS_CTRL_*).
const (
	ctrlDisconnect = 0
	ctrlKeepAlive  = 1
	ctrlShutdown   = 2
)

// msg makes an immediate from an operation and its data (rs_msg_set).
func msg(op, data uint32) uint32 { return op<<29 | data&dataMask }

// msgOp and msgData split an immediate (rs_msg_op, rs_msg_data).
func msgOp(m uint32) uint32   { return m >> 29 }
func msgData(m uint32) uint32 { return m & dataMask }
