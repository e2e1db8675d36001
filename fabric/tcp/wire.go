package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format of libfabric 1.17's tcp provider (version 3), which its
// net provider and later tcp providers speak too. Headers are in the
// sender's byte order, which the connection messages' conn_data probe
// (1) reveals; peers on x86 and arm64 are little-endian, and this package
// speaks little-endian and refuses a big-endian peer.

// Connection management message: a 32-byte control header and up to 256
// bytes of private data.
const (
	cmVersion   = 3
	cmHeaderLen = 32
	maxCMData   = 256
	cmConnReq   = 0
	cmConnResp  = 1
	cmNack      = 6
	hdrVersion  = 3
	baseHdrLen  = 16
	maxHdrLen   = 120 // base + cq_data/tag + 4 RMA iovs
	maxIOV      = 4
	rmaIOVLen   = 24
	injectSize  = 128
)

// Operations (ofi_op) and header flags.
const (
	opMsg     = 0
	opTagged  = 1
	opReadReq = 2
	opReadRsp = 3
	opWrite   = 4

	flagRemoteCQData     = 0x1
	flagDeliveryComplete = 0x4
	flagCommitComplete   = 0x8
	flagTagged           = 0x80

	opDataAck = 2
)

var (
	errCMVersion = errors.New("connection message of another protocol version")
	errEndian    = errors.New("big-endian peer: not supported")
)

// marshalCM builds a CM message (struct ofi_ctrl_hdr + private data).
func marshalCM(typ uint8, data []byte) []byte {
	b := make([]byte, cmHeaderLen+len(data))
	b[0] = cmVersion
	b[1] = typ
	binary.BigEndian.PutUint16(b[2:], uint16(len(data)))
	if typ != cmNack {
		binary.LittleEndian.PutUint64(b[24:], 1) // the endianness probe
	}
	copy(b[cmHeaderLen:], data)
	return b
}

// parseCMHeader checks a CM header and returns its type and the length of
// the private data that follows.
func parseCMHeader(h []byte) (typ uint8, dataLen int, err error) {
	if len(h) < cmHeaderLen {
		return 0, 0, fmt.Errorf("connection message of %d bytes", len(h))
	}
	if h[0] != cmVersion {
		return 0, 0, errCMVersion
	}
	typ = h[1]
	dataLen = int(binary.BigEndian.Uint16(h[2:]))
	if dataLen > maxCMData {
		return 0, 0, fmt.Errorf("connection message with %d bytes of private data (at most %d)", dataLen, maxCMData)
	}
	if typ != cmNack && binary.LittleEndian.Uint64(h[24:]) != 1 {
		return 0, 0, errEndian
	}
	return typ, dataLen, nil
}

// rmaIOV is one target range of an RMA operation (struct ofi_rma_iov).
type rmaIOV struct {
	addr, len, key uint64
}

// header is a parsed operation header (struct tcpx_base_hdr and its
// extensions).
type header struct {
	op      uint8
	flags   uint16
	opData  uint8
	hdrSize int
	size    uint64 // header and payload
	cqData  uint64
	tag     uint64
	iov     []rmaIOV
}

// payload is the number of bytes after the header.
func (h *header) payload() uint64 { return h.size - uint64(h.hdrSize) }

// parseBase reads the fixed 16 bytes: the whole header's size and the
// frame's.
func parseBase(b []byte) (hdrSize int, err error) {
	if b[0] != hdrVersion {
		return 0, fmt.Errorf("frame header version %d, want %d", b[0], hdrVersion)
	}
	if b[1] > opWrite {
		return 0, fmt.Errorf("frame with unknown operation %d", b[1])
	}
	hs := int(b[6])
	if hs < baseHdrLen || hs > maxHdrLen || hs%8 != 0 {
		return 0, fmt.Errorf("frame header of %d bytes", hs)
	}
	if size := binary.LittleEndian.Uint64(b[8:]); size < uint64(hs) {
		return 0, fmt.Errorf("frame of %d bytes with a %d-byte header", size, hs)
	}
	return hs, nil
}

// parseHeader parses a whole header (len(b) == its hdr_size).
func parseHeader(b []byte) (header, error) {
	hs, err := parseBase(b)
	if err != nil {
		return header{}, err
	}
	if len(b) != hs {
		return header{}, fmt.Errorf("header of %d bytes, says %d", len(b), hs)
	}
	h := header{op: b[1], flags: binary.LittleEndian.Uint16(b[2:]), opData: b[4], hdrSize: hs,
		size: binary.LittleEndian.Uint64(b[8:])}
	ext := b[baseHdrLen:]
	take := func() (uint64, bool) {
		if len(ext) < 8 {
			return 0, false
		}
		v := binary.LittleEndian.Uint64(ext)
		ext = ext[8:]
		return v, true
	}
	var ok bool
	if h.flags&flagRemoteCQData != 0 && h.op != opReadRsp {
		if h.cqData, ok = take(); !ok {
			return header{}, errors.New("header too short for its CQ data")
		}
	}
	switch h.op {
	case opMsg, opTagged:
		if h.op == opTagged || h.flags&flagTagged != 0 {
			if h.tag, ok = take(); !ok {
				return header{}, errors.New("header too short for its tag")
			}
		}
	case opReadReq, opWrite:
		n := int(b[5])
		if n < 1 || n > maxIOV || len(ext) < n*rmaIOVLen {
			return header{}, fmt.Errorf("RMA header with %d iovs and %d bytes for them", n, len(ext))
		}
		var total uint64
		for i := 0; i < n; i++ {
			v := rmaIOV{binary.LittleEndian.Uint64(ext), binary.LittleEndian.Uint64(ext[8:]), binary.LittleEndian.Uint64(ext[16:])}
			ext = ext[rmaIOVLen:]
			total += v.len
			h.iov = append(h.iov, v)
		}
		if h.op == opReadReq && h.payload() != 0 {
			return header{}, errors.New("read request with a payload")
		}
		if h.op == opWrite && total != h.payload() {
			return header{}, fmt.Errorf("write of %d bytes for %d bytes of iovs", h.payload(), total)
		}
	}
	if h.op == opMsg && h.opData == opDataAck && h.size != baseHdrLen {
		return header{}, fmt.Errorf("ack of %d bytes", h.size)
	}
	return h, nil
}

// marshalHeader builds a header into b (at least maxHdrLen bytes) for a
// payload of n bytes and returns its length.
func marshalHeader(b []byte, h *header, n uint64) int {
	off := baseHdrLen
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[off:], v)
		off += 8
	}
	if h.flags&flagRemoteCQData != 0 && h.op != opReadRsp {
		put(h.cqData)
	}
	if h.op == opTagged || h.flags&flagTagged != 0 {
		put(h.tag)
	}
	for _, v := range h.iov {
		put(v.addr)
		put(v.len)
		put(v.key)
	}
	b[0] = hdrVersion
	b[1] = h.op
	binary.LittleEndian.PutUint16(b[2:], h.flags)
	b[4] = h.opData
	b[5] = uint8(len(h.iov))
	b[6] = uint8(off)
	b[7] = 0
	binary.LittleEndian.PutUint64(b[8:], uint64(off)+n)
	return off
}

// ackFrame is the 16-byte acknowledgement of a message sent with
// DELIVERY_COMPLETE or COMMIT_COMPLETE.
var ackFrame = func() []byte {
	b := make([]byte, maxHdrLen)
	n := marshalHeader(b, &header{op: opMsg, opData: opDataAck}, 0)
	return b[:n]
}()
