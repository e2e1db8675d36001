package pcap

import (
	"fmt"
	"time"
)

// readEPB reads the body of an Enhanced Packet Block: interface ID,
// timestamp (high and low 32 bits), captured length, original length, the
// packet data padded to 32 bits, and options.
func (r *Reader) readEPB(b *block) (Packet, error) {
	var f [20]byte
	if err := b.read(f[:], "enhanced packet header"); err != nil {
		return Packet{}, err
	}
	id := r.order.Uint32(f[0:])
	ts := uint64(r.order.Uint32(f[4:]))<<32 | uint64(r.order.Uint32(f[8:]))
	return r.readPacketData(b, uint64(id), ts, r.order.Uint32(f[12:]), r.order.Uint32(f[16:]))
}

// readPB reads the body of an obsolete Packet Block: a 16-bit interface ID,
// a 16-bit drops count, and then the same fields as an Enhanced Packet Block.
func (r *Reader) readPB(b *block) (Packet, error) {
	var f [20]byte
	if err := b.read(f[:], "packet header"); err != nil {
		return Packet{}, err
	}
	id := r.order.Uint16(f[0:])
	ts := uint64(r.order.Uint32(f[4:]))<<32 | uint64(r.order.Uint32(f[8:]))
	return r.readPacketData(b, uint64(id), ts, r.order.Uint32(f[12:]), r.order.Uint32(f[16:]))
}

// readPacketData checks the interface and lengths of a packet block, reads
// its data and finishes the block.
func (r *Reader) readPacketData(b *block, id, ts uint64, caplen, orig uint32) (Packet, error) {
	if id >= uint64(len(r.ifaces)) {
		return Packet{}, &Error{Offset: b.start, Msg: fmt.Sprintf("%s refers to undefined interface %d (section has %d)", blockName(b.typ), id, len(r.ifaces))}
	}
	if uint64(caplen) > uint64(b.remain) {
		return Packet{}, &Error{Offset: b.start, Msg: fmt.Sprintf("captured length %d overruns %s of length %d", caplen, blockName(b.typ), b.total)}
	}
	if caplen > MaxPacketLen {
		return Packet{}, &Error{Offset: b.start, Msg: fmt.Sprintf("captured length %d exceeds maximum %d", caplen, MaxPacketLen)}
	}
	ifc := &r.ifaces[id]
	data := r.data(int(caplen))
	if err := b.readData(data); err != nil {
		return Packet{}, err
	}
	if err := b.finish(); err != nil {
		return Packet{}, err
	}
	return Packet{
		Time:      ifc.time(ts),
		LinkType:  ifc.linkType,
		Data:      data,
		OrigLen:   int(orig),
		Offset:    b.start,
		Interface: int(id),
	}, nil
}

// readSPB reads the body of a Simple Packet Block: the original length and
// the packet data, captured on interface 0 and truncated to its snapshot
// length. The block has no timestamp.
func (r *Reader) readSPB(b *block) (Packet, error) {
	if len(r.ifaces) == 0 {
		return Packet{}, &Error{Offset: b.start, Msg: "simple packet block in a section with no interface"}
	}
	var f [4]byte
	if err := b.read(f[:], "simple packet header"); err != nil {
		return Packet{}, err
	}
	ifc := &r.ifaces[0]
	orig := r.order.Uint32(f[:])
	caplen := uint64(orig)
	if ifc.snaplen > 0 {
		caplen = min(caplen, uint64(ifc.snaplen))
	}
	// The block may be shorter than min(snaplen, orig) if the writer
	// truncated more; the block length is authoritative.
	caplen = min(caplen, uint64(b.remain))
	if caplen > MaxPacketLen {
		return Packet{}, &Error{Offset: b.start, Msg: fmt.Sprintf("captured length %d exceeds maximum %d", caplen, MaxPacketLen)}
	}
	data := r.data(int(caplen))
	if err := b.readData(data); err != nil {
		return Packet{}, err
	}
	if err := b.finish(); err != nil {
		return Packet{}, err
	}
	return Packet{
		Time:     time.Time{},
		LinkType: ifc.linkType,
		Data:     data,
		OrigLen:  int(orig),
		Offset:   b.start,
	}, nil
}
