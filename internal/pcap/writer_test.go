package pcap

import (
	"encoding/binary"
	"math"
)

// This file holds a tiny writer for building capture files in tests. It
// records where each record or block ends so that tests know the boundaries
// at which a truncated file may end cleanly.

// byteOrder is a byte order that can both decode and append.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// pcapFile is a classic pcap file under construction.
type pcapFile struct {
	order byteOrder
	buf   []byte
	ends  []int // offsets where the file header and each record end
	n     int   // records written
}

// newPcapFile starts a pcap file with the given byte order, timestamp
// resolution, snapshot length and raw link-type field.
func newPcapFile(order byteOrder, nano bool, snaplen, linkType uint32) *pcapFile {
	magic := uint32(0xa1b2c3d4)
	if nano {
		magic = 0xa1b23c4d
	}
	f := &pcapFile{order: order}
	f.buf = order.AppendUint32(f.buf, magic)
	f.buf = order.AppendUint16(f.buf, 2)
	f.buf = order.AppendUint16(f.buf, 4)
	f.buf = order.AppendUint32(f.buf, 0) // thiszone
	f.buf = order.AppendUint32(f.buf, 0) // sigfigs
	f.buf = order.AppendUint32(f.buf, snaplen)
	f.buf = order.AppendUint32(f.buf, linkType)
	f.ends = append(f.ends, len(f.buf))
	return f
}

// record appends a record with the given timestamp, data and original length.
func (f *pcapFile) record(sec, frac uint32, data []byte, orig uint32) *pcapFile {
	return f.rawRecord(sec, frac, uint32(len(data)), orig, data)
}

// rawRecord appends a record whose captured length field may disagree with
// the data that follows.
func (f *pcapFile) rawRecord(sec, frac, incl, orig uint32, data []byte) *pcapFile {
	f.buf = f.order.AppendUint32(f.buf, sec)
	f.buf = f.order.AppendUint32(f.buf, frac)
	f.buf = f.order.AppendUint32(f.buf, incl)
	f.buf = f.order.AppendUint32(f.buf, orig)
	f.buf = append(f.buf, data...)
	f.ends = append(f.ends, len(f.buf))
	f.n++
	return f
}

// ngFile is a pcapng file under construction.
type ngFile struct {
	order   byteOrder
	buf     []byte
	ends    []int // offsets where each block ends
	packets []int // number of packets in the file after each block
	n       int   // packet blocks written
}

// newNGFile starts a pcapng file with a Section Header Block in byte order
// order.
func newNGFile(order byteOrder) *ngFile {
	return new(ngFile).shb(order)
}

// pad4 pads b with zeros to a multiple of 4 bytes.
func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// rawBlock appends a block with explicit leading and trailing lengths and
// an unpadded body.
func (f *ngFile) rawBlock(typ, lead, trail uint32, body []byte) *ngFile {
	f.buf = f.order.AppendUint32(f.buf, typ)
	f.buf = f.order.AppendUint32(f.buf, lead)
	f.buf = append(f.buf, body...)
	f.buf = f.order.AppendUint32(f.buf, trail)
	f.ends = append(f.ends, len(f.buf))
	if typ == blockEPB || typ == blockPB || typ == blockSPB {
		f.n++
	}
	f.packets = append(f.packets, f.n)
	return f
}

// block appends a well-formed block with the given body, padded to 32 bits.
func (f *ngFile) block(typ uint32, body []byte) *ngFile {
	body = pad4(body)
	n := uint32(minBlockLen + len(body))
	return f.rawBlock(typ, n, n, body)
}

// opt encodes an option in the current byte order.
func (f *ngFile) opt(code uint16, val []byte) []byte {
	b := f.order.AppendUint16(nil, code)
	b = f.order.AppendUint16(b, uint16(len(val)))
	return pad4(append(b, val...))
}

// endOpt encodes opt_endofopt.
func (f *ngFile) endOpt() []byte { return f.opt(optEndOfOpt, nil) }

// options concatenates encoded options.
func options(opts ...[]byte) []byte {
	var b []byte
	for _, o := range opts {
		b = append(b, o...)
	}
	return b
}

// shb appends a Section Header Block, version 1.0, switching the file to
// byte order order.
func (f *ngFile) shb(order byteOrder, opts ...[]byte) *ngFile {
	f.order = order
	b := order.AppendUint32(nil, byteOrderMagic)
	b = order.AppendUint16(b, 1)
	b = order.AppendUint16(b, 0)
	b = order.AppendUint64(b, math.MaxUint64) // section length unknown
	return f.block(blockSHB, append(b, options(opts...)...))
}

// idb appends an Interface Description Block.
func (f *ngFile) idb(lt LinkType, snaplen uint32, opts ...[]byte) *ngFile {
	b := f.order.AppendUint16(nil, uint16(lt))
	b = f.order.AppendUint16(b, 0)
	b = f.order.AppendUint32(b, snaplen)
	return f.block(blockIDB, append(b, options(opts...)...))
}

// tsresol returns an if_tsresol option.
func (f *ngFile) tsresol(v byte) []byte { return f.opt(optTSResol, []byte{v}) }

// tsoffset returns an if_tsoffset option.
func (f *ngFile) tsoffset(sec int64) []byte {
	return f.opt(optTSOffset, f.order.AppendUint64(nil, uint64(sec)))
}

// epbBody encodes the body of an Enhanced Packet Block with a captured
// length field of caplen.
func (f *ngFile) epbBody(id uint32, ts uint64, caplen uint32, data []byte, orig uint32) []byte {
	b := f.order.AppendUint32(nil, id)
	b = f.order.AppendUint32(b, uint32(ts>>32))
	b = f.order.AppendUint32(b, uint32(ts))
	b = f.order.AppendUint32(b, caplen)
	b = f.order.AppendUint32(b, orig)
	return append(b, data...)
}

// epb appends an Enhanced Packet Block.
func (f *ngFile) epb(id uint32, ts uint64, data []byte, orig uint32, opts ...[]byte) *ngFile {
	b := pad4(f.epbBody(id, ts, uint32(len(data)), data, orig))
	return f.block(blockEPB, append(b, options(opts...)...))
}

// pb appends an obsolete Packet Block.
func (f *ngFile) pb(id uint16, ts uint64, data []byte, orig uint32) *ngFile {
	b := f.order.AppendUint16(nil, id)
	b = f.order.AppendUint16(b, 0) // drops count
	b = f.order.AppendUint32(b, uint32(ts>>32))
	b = f.order.AppendUint32(b, uint32(ts))
	b = f.order.AppendUint32(b, uint32(len(data)))
	b = f.order.AppendUint32(b, orig)
	return f.block(blockPB, append(b, data...))
}

// spb appends a Simple Packet Block.
func (f *ngFile) spb(orig uint32, data []byte) *ngFile {
	return f.block(blockSPB, append(f.order.AppendUint32(nil, orig), data...))
}
