package sockets

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The wire format of libfabric 1.17's sockets provider (its
// SOCK_WIRE_PROTO_VERSION 2), as a C peer reads and writes it.
//
// Data travels on TCP connections between endpoints' data listeners. A
// connection's opener first sends a CONN_MSG naming its own listener, by
// which the acceptor knows the peer (its AV entry, for an RDM endpoint).
// Every message starts with a 24-byte header:
//
//	0  version (2)     1  op             2  rx_id (0)   3  dest_iov_len
//	4  pe_entry_id (big-endian)          6  reserved
//	8  flags (big-endian: the operation's FI_* flags)
//	16 msg_len (big-endian: the whole message, header included)
//
// and then, by op:
//
//	SEND    [cq data if FI_REMOTE_CQ_DATA] data
//	TSEND   tag [cq data] data
//	WRITE   [cq data] dest_iov_len target iovs, data
//	READ    dest_iov_len source iovs
//	CONN_MSG  the sender's listener as a 48-byte socket address
//
// A target iov is struct fi_rma_iov: address, length, key, each 8 bytes
// in the host's order (little-endian here, as on the C peers this
// speaks to). Tag and CQ data are in the host's order too. A response
// (SEND_COMPLETE for a message sent with FI_TRANSMIT_COMPLETE,
// WRITE_COMPLETE, READ_COMPLETE followed by the data read, and the
// _ERROR ones) is a header with the request's rx_id, then the request's
// pe_entry_id (big-endian) and an error number (big-endian), 40 bytes in
// all.
//
// FI_EP_MSG endpoints also have a connection to the passive endpoint's
// listener for connection management: the active side sends a request
// (an 8-byte header: type 0, its data listener's port (big-endian),
// the private data's length (big-endian); its listener's socket address
// in 48 bytes; its caps (8 bytes, host order); the private data), the
// passive side answers with ACCEPT (type 1, with its own data listener's
// port) or REJECT (type 2), each header followed by private data, and
// either side later sends SHUTDOWN (type 3).

const (
	wireVersion = 2
	hdrLen      = 24
	iovLen      = 24 // struct fi_rma_iov
	addrLen     = 48 // union ofi_sock_ip
	respLen     = 40 // struct sock_msg_response
	connHdrLen  = 8  // struct sock_conn_hdr
	connReqLen  = connHdrLen + addrLen + 8

	maxIOV    = 8   // SOCK_EP_MAX_IOV_LIMIT
	maxInject = 255 // SOCK_EP_MAX_INJECT_SZ
	maxCMData = 256 // SOCK_EP_MAX_CM_DATA_SZ
)

// Operations (SOCK_OP_*).
const (
	opSend          = 0
	opTSend         = 1
	opSendComplete  = 2
	opWrite         = 3
	opWriteComplete = 4
	opWriteError    = 5
	opRead          = 6
	opReadComplete  = 7
	opReadError     = 8
	opAtomic        = 9
	opAtomicDone    = 10
	opAtomicError   = 11
	opConnMsg       = 12
)

// Connection management message types (SOCK_CONN_*).
const (
	connRequest  = 0
	connAccept   = 1
	connReject   = 2
	connShutdown = 3
)

// The FI_* flags a message's header carries that its receiver acts on.
const (
	flagRemoteCQData     = 1 << 17
	flagInject           = 1 << 25
	flagInjectComplete   = 1 << 26
	flagTransmitComplete = 1 << 27
	flagDeliveryComplete = 1 << 28
)

// header is a message header.
type header struct {
	op         uint8
	rxID       uint8
	destIOVLen uint8
	peID       uint16
	flags      uint64
	msgLen     uint64
}

func (h *header) put(b []byte) {
	b[0] = wireVersion
	b[1] = h.op
	b[2] = h.rxID
	b[3] = h.destIOVLen
	binary.BigEndian.PutUint16(b[4:], h.peID)
	b[6], b[7] = 0, 0
	binary.BigEndian.PutUint64(b[8:], h.flags)
	binary.BigEndian.PutUint64(b[16:], h.msgLen)
}

// errWire is a malformed message: the connection that carried it is
// dropped.
var errWire = errors.New("malformed sockets provider message")

// parseHeader reads a header, checking what a receiver relies on: the
// version, a known operation, and a length that covers what the
// operation's fixed part needs.
func parseHeader(b []byte) (header, error) {
	if len(b) < hdrLen {
		return header{}, fmt.Errorf("%w: %d-byte header", errWire, len(b))
	}
	if b[0] != wireVersion {
		return header{}, fmt.Errorf("%w: version %d", errWire, b[0])
	}
	h := header{op: b[1], rxID: b[2], destIOVLen: b[3], peID: binary.BigEndian.Uint16(b[4:]),
		flags: binary.BigEndian.Uint64(b[8:]), msgLen: binary.BigEndian.Uint64(b[16:])}
	if h.msgLen < uint64(h.fixedLen()) {
		return header{}, fmt.Errorf("%w: op %d of %d bytes, under its %d", errWire, h.op, h.msgLen, h.fixedLen())
	}
	switch h.op {
	case opSend, opTSend, opSendComplete, opWrite, opWriteComplete, opWriteError, opRead,
		opReadComplete, opReadError, opAtomic, opAtomicDone, opAtomicError, opConnMsg:
	default:
		return header{}, fmt.Errorf("%w: op %d", errWire, h.op)
	}
	if h.destIOVLen > maxIOV {
		return header{}, fmt.Errorf("%w: %d iovs", errWire, h.destIOVLen)
	}
	return h, nil
}

// fixedLen is how many bytes the operation's message has before its data.
func (h *header) fixedLen() int {
	n := hdrLen
	switch h.op {
	case opTSend:
		n += 8
	case opWrite, opRead:
		n += int(h.destIOVLen) * iovLen
	case opSendComplete, opWriteComplete, opWriteError, opReadComplete, opReadError, opAtomicDone, opAtomicError:
		return respLen
	case opConnMsg:
		return hdrLen + addrLen
	case opAtomic:
		n += sockOpLen
	}
	if h.flags&flagRemoteCQData != 0 && (h.op == opSend || h.op == opTSend || h.op == opWrite || h.op == opAtomic) {
		n += 8
	}
	return n
}

// rmaIOV is a target range: struct fi_rma_iov.
type rmaIOV struct {
	addr, len, key uint64
}

func (v rmaIOV) put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], v.addr)
	binary.LittleEndian.PutUint64(b[8:], v.len)
	binary.LittleEndian.PutUint64(b[16:], v.key)
}

func parseIOV(b []byte) rmaIOV {
	return rmaIOV{binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}
}

// response is a response's body after its header.
type response struct {
	peID uint16
	err  int32
}

func putResponse(b []byte, op, rxID uint8, peID uint16, errno int32, dataLen int) {
	h := header{op: op, rxID: rxID, msgLen: uint64(respLen + dataLen)}
	h.put(b)
	binary.BigEndian.PutUint16(b[24:], peID)
	b[26], b[27] = 0, 0
	binary.BigEndian.PutUint32(b[28:], uint32(errno))
	clear(b[32:respLen])
}

func parseResponse(b []byte) response {
	return response{peID: binary.BigEndian.Uint16(b[24:]), err: int32(binary.BigEndian.Uint32(b[28:]))}
}

// putAddr writes a socket address as union ofi_sock_ip: struct
// sockaddr_in or sockaddr_in6 (family in the host's order, port and
// address in the network's), zero-padded to 48 bytes.
func putAddr(b []byte, a netip.AddrPort) {
	clear(b[:addrLen])
	ip := a.Addr()
	if ip.Is4() || ip.Is4In6() {
		binary.LittleEndian.PutUint16(b[0:], 2) // AF_INET
		binary.BigEndian.PutUint16(b[2:], a.Port())
		v := ip.Unmap().As4()
		copy(b[4:8], v[:])
		return
	}
	binary.LittleEndian.PutUint16(b[0:], 10) // AF_INET6
	binary.BigEndian.PutUint16(b[2:], a.Port())
	v := ip.As16()
	copy(b[8:24], v[:])
}

// parseAddr reads a socket address as putAddr writes it.
func parseAddr(b []byte) (netip.AddrPort, error) {
	if len(b) < addrLen {
		return netip.AddrPort{}, fmt.Errorf("%w: %d-byte address", errWire, len(b))
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch binary.LittleEndian.Uint16(b[0:]) {
	case 2:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	case 10:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("%w: address family %d", errWire, binary.LittleEndian.Uint16(b[0:]))
}

// connHeader is a connection management message's header.
type connHeader struct {
	typ    uint8
	port   uint16
	dataSz uint16
}

func (h connHeader) put(b []byte) {
	b[0] = h.typ
	b[1], b[2], b[3] = 0, 0, 0
	binary.BigEndian.PutUint16(b[4:], h.port)
	binary.BigEndian.PutUint16(b[6:], h.dataSz)
}

func parseConnHeader(b []byte) (connHeader, error) {
	if len(b) < connHdrLen {
		return connHeader{}, fmt.Errorf("%w: %d-byte connection header", errWire, len(b))
	}
	h := connHeader{typ: b[0], port: binary.BigEndian.Uint16(b[4:]), dataSz: binary.BigEndian.Uint16(b[6:])}
	if h.typ > connShutdown {
		return connHeader{}, fmt.Errorf("%w: connection message type %d", errWire, h.typ)
	}
	if h.dataSz > maxCMData {
		return connHeader{}, fmt.Errorf("%w: %d bytes of private data", errWire, h.dataSz)
	}
	return h, nil
}
