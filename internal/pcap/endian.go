package pcap

import "encoding/binary"

// endian is the byte order of a pcap file or pcapng section. It is a
// concrete type rather than a binary.ByteOrder so that decoding a header
// through it does not make the header's array escape to the heap.
type endian bool

const (
	littleEndian endian = false
	bigEndian    endian = true
)

// Uint16 decodes b[0:2].
func (e endian) Uint16(b []byte) uint16 {
	if e == bigEndian {
		return binary.BigEndian.Uint16(b)
	}
	return binary.LittleEndian.Uint16(b)
}

// Uint32 decodes b[0:4].
func (e endian) Uint32(b []byte) uint32 {
	if e == bigEndian {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

// Uint64 decodes b[0:8].
func (e endian) Uint64(b []byte) uint64 {
	if e == bigEndian {
		return binary.BigEndian.Uint64(b)
	}
	return binary.LittleEndian.Uint64(b)
}
