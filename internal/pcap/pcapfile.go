package pcap

import (
	"fmt"
	"time"
)

// Sizes of the classic pcap file header and record header.
const (
	pcapFileHeaderLen   = 24
	pcapRecordHeaderLen = 16
)

// linkTypeMask selects the link type from the pcap header's link-type field;
// the upper 16 bits hold the FCS length and reserved bits.
const linkTypeMask = 0xffff

// readPcapHeader reads the 24-byte pcap file header: magic, version major
// and minor, thiszone, sigfigs, snaplen and link type.
func (r *Reader) readPcapHeader() error {
	var h [pcapFileHeaderLen]byte
	if _, err := r.readFixed(h[:]); err != nil {
		return readError(err, 0, "pcap file header")
	}
	switch [4]byte(h[:4]) {
	case magicPcapLE:
		r.order = littleEndian
	case magicPcapBE:
		r.order = bigEndian
	case magicPcapNsLE:
		r.order, r.nano = littleEndian, true
	case magicPcapNsBE:
		r.order, r.nano = bigEndian, true
	}
	major, minor := r.order.Uint16(h[4:]), r.order.Uint16(h[6:])
	if major != 2 {
		return &Error{Msg: fmt.Sprintf("unsupported pcap version %d.%d", major, minor)}
	}
	r.snaplen = r.order.Uint32(h[16:])
	r.linkType = LinkType(r.order.Uint32(h[20:]) & linkTypeMask)
	return nil
}

// nextPcap reads one pcap record: a 16-byte header (seconds, microseconds or
// nanoseconds, captured length, original length) and the captured bytes.
func (r *Reader) nextPcap() (Packet, error) {
	start := r.off
	var h [pcapRecordHeaderLen]byte
	if err := r.readHeader(h[:], "pcap record header"); err != nil {
		return Packet{}, err
	}
	sec := r.order.Uint32(h[0:])
	frac := r.order.Uint32(h[4:])
	incl := r.order.Uint32(h[8:])
	orig := r.order.Uint32(h[12:])
	if incl > MaxPacketLen {
		return Packet{}, &Error{Offset: start, Msg: fmt.Sprintf("captured length %d exceeds maximum %d", incl, MaxPacketLen)}
	}
	// A record longer than the snapshot length is kept whole: libpcap and
	// Wireshark read such files (some writers set snaplen loosely).
	data := r.data(int(incl))
	if err := r.readData(data); err != nil {
		return Packet{}, readError(err, start, "pcap record")
	}
	ns := int64(frac)
	if !r.nano {
		ns *= 1000
	}
	return Packet{
		Time:     time.Unix(int64(sec), ns).UTC(),
		LinkType: r.linkType,
		Data:     data,
		OrigLen:  int(orig),
		Offset:   start,
	}, nil
}
