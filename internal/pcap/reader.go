package pcap

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// MaxPacketLen is the largest captured length, in bytes, that a [Reader]
// accepts for one packet: 262144, the default snapshot length of tcpdump and
// Wireshark. A larger length is reported as an error; the Reader never
// allocates a data buffer larger than this.
const MaxPacketLen = 256 << 10

// MaxBlockLen is the largest pcapng block, in bytes, that a [Reader] accepts.
// Blocks that are not packets are skipped without being held in memory, so
// this limit only guards against absurd lengths in corrupt files.
const MaxBlockLen = 16 << 20

// bufferSize is the size of the bufio.Reader wrapped around the input.
const bufferSize = 32 << 10

// minDataCap is the smallest data buffer the Reader allocates, so that a file
// of small packets that grow slowly does not reallocate for each one.
const minDataCap = 2048

// Packet is one captured frame.
type Packet struct {
	// Time is the absolute capture timestamp, in UTC. It honours the
	// nanosecond magic of pcap files and the if_tsresol and if_tsoffset
	// options of pcapng interfaces. It is the zero Time for a pcapng Simple
	// Packet Block, which carries no timestamp.
	Time time.Time
	// LinkType is the link-layer header type of the interface the frame was
	// captured on.
	LinkType LinkType
	// Data holds the captured bytes. It is valid only until the next call
	// to [Reader.Next]: the Reader reuses its buffer.
	Data []byte
	// OrigLen is the length of the frame on the wire, as recorded in the
	// file. It may be smaller than len(Data) in a corrupt file.
	OrigLen int
	// Offset is the byte offset in the file of the pcap record or pcapng
	// block holding the frame.
	Offset int64
	// Index is the 1-based number of the packet in the file.
	Index int
	// Interface is the pcapng interface the frame was captured on, as an
	// index into the interfaces of its section; 0 for pcap files.
	Interface int
}

// format is the container format of a capture file.
type format uint8

const (
	formatPcap format = iota + 1
	formatPcapng
)

// Reader reads packets from a pcap or pcapng stream. The format is detected
// from the first four bytes. A Reader is not safe for concurrent use.
type Reader struct {
	br     *bufio.Reader
	off    int64 // bytes consumed from br
	format format
	count  int    // packets returned so far
	buf    []byte // reused packet buffer
	err    error  // sticky error: io.EOF or *Error

	// order is the byte order of the pcap file or of the current pcapng
	// section.
	order endian

	// pcap state.
	nano     bool
	snaplen  uint32
	linkType LinkType

	// pcapng state: the interfaces of the current section.
	ifaces []iface
}

// Magic numbers, as they appear in the first four bytes of a file.
var (
	magicPcapLE   = [4]byte{0xd4, 0xc3, 0xb2, 0xa1} // 0xa1b2c3d4, microseconds
	magicPcapBE   = [4]byte{0xa1, 0xb2, 0xc3, 0xd4}
	magicPcapNsLE = [4]byte{0x4d, 0x3c, 0xb2, 0xa1} // 0xa1b23c4d, nanoseconds
	magicPcapNsBE = [4]byte{0xa1, 0xb2, 0x3c, 0x4d}
	magicPcapng   = [4]byte{0x0a, 0x0d, 0x0d, 0x0a} // section header block type
)

// NewReader returns a Reader for the capture file in r. It reads and checks
// the file header (for pcapng, the first Section Header Block) and returns
// an [*Error] if the input is empty, starts with an unknown magic number or
// has a malformed header.
//
// NewReader wraps r in a bufio.Reader; reading from r directly afterwards
// gives unpredictable results.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{br: bufio.NewReaderSize(r, bufferSize)}
	b, err := rd.br.Peek(4)
	if len(b) < 4 {
		switch {
		case len(b) == 0 && err == io.EOF:
			return nil, &Error{Msg: "empty file"}
		case err == io.EOF:
			return nil, &Error{Msg: "truncated file header"}
		default:
			return nil, &Error{Msg: "reading file header", Err: err}
		}
	}
	magic := [4]byte(b)
	switch magic {
	case magicPcapLE, magicPcapBE, magicPcapNsLE, magicPcapNsBE:
		rd.format = formatPcap
		err = rd.readPcapHeader()
	case magicPcapng:
		rd.format = formatPcapng
		err = rd.readFirstSection()
	default:
		return nil, &Error{Msg: fmt.Sprintf("unknown file magic %#08x: not a pcap or pcapng file", binary.BigEndian.Uint32(b))}
	}
	if err != nil {
		return nil, err
	}
	return rd, nil
}

// Format returns the container format of the file: "pcap" or "pcapng".
func (r *Reader) Format() string {
	if r.format == formatPcapng {
		return "pcapng"
	}
	return "pcap"
}

// Next returns the next packet. It returns io.EOF when the input ends
// cleanly at a record or block boundary; any other problem, including input
// that ends in the middle of a record or block, is reported as an [*Error].
// Once Next has returned an error it returns the same error on every later
// call.
//
// The returned Packet's Data is valid only until the next call to Next.
func (r *Reader) Next() (Packet, error) {
	if r.err != nil {
		return Packet{}, r.err
	}
	var (
		p   Packet
		err error
	)
	if r.format == formatPcapng {
		p, err = r.nextPcapng()
	} else {
		p, err = r.nextPcap()
	}
	if err != nil {
		r.err = err
		return Packet{}, err
	}
	r.count++
	p.Index = r.count
	return p, nil
}

// data returns the packet buffer resliced to n bytes, growing it if needed.
// The caller guarantees 0 <= n <= MaxPacketLen.
func (r *Reader) data(n int) []byte {
	if cap(r.buf) < n {
		c := max(n, 2*cap(r.buf), minDataCap)
		c = min(c, MaxPacketLen)
		r.buf = make([]byte, c)
	}
	return r.buf[:n]
}

// readFixed reads len(p) bytes, at most bufferSize, into p through the
// bufio.Reader's buffer. Unlike io.ReadFull it never hands p to an
// io.Reader, so that a caller's fixed-size header array can stay on the
// stack. It returns the number of bytes read and, if that is less than
// len(p), why.
func (r *Reader) readFixed(p []byte) (int, error) {
	b, err := r.br.Peek(len(p))
	n := copy(p, b)
	r.br.Discard(n) // cannot fail: the n bytes are buffered
	r.off += int64(n)
	if n == len(p) {
		return n, nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// readData reads len(p) bytes of packet data into p, which may be larger
// than the bufio.Reader's buffer.
func (r *Reader) readData(p []byte) error {
	n, err := io.ReadFull(r.br, p)
	r.off += int64(n)
	return err
}

// skip discards n bytes of input.
func (r *Reader) skip(n int) error {
	m, err := r.br.Discard(n)
	r.off += int64(m)
	return err
}

// readHeader reads the fixed-size header of the next record or block into p.
// It returns io.EOF if the input ends before the first byte, and an *Error
// naming what if it ends part-way through.
func (r *Reader) readHeader(p []byte, what string) error {
	start := r.off
	n, err := r.readFixed(p)
	switch {
	case err == nil:
		return nil
	case n == 0 && err == io.EOF:
		return io.EOF
	}
	return readError(err, start, what)
}

// readError converts an error from the underlying reader, met while reading
// the structure named what that starts at offset start, into an *Error.
func readError(err error, start int64, what string) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return &Error{Offset: start, Msg: "truncated " + what}
	}
	return &Error{Offset: start, Msg: "reading " + what, Err: err}
}
