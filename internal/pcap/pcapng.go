package pcap

import "fmt"

// pcapng block types.
const (
	blockSHB = 0x0a0d0d0a // Section Header Block
	blockIDB = 1          // Interface Description Block
	blockPB  = 2          // Packet Block (obsolete)
	blockSPB = 3          // Simple Packet Block
	blockNRB = 4          // Name Resolution Block
	blockISB = 5          // Interface Statistics Block
	blockEPB = 6          // Enhanced Packet Block
	blockDSB = 0x0a       // Decryption Secrets Block
)

// Minimum total lengths of pcapng blocks: 12 bytes of block type, leading
// and trailing length, plus the fixed fields of each type.
const (
	minBlockLen = 12
	minSHBLen   = minBlockLen + 16 // byte-order magic, version, section length
	minIDBLen   = minBlockLen + 8  // link type, reserved, snaplen
	minEPBLen   = minBlockLen + 20 // interface, timestamp, lengths
	minPBLen    = minBlockLen + 20 // interface, drops, timestamp, lengths
	minSPBLen   = minBlockLen + 4  // original length
)

// byteOrderMagic is the Section Header Block's byte-order magic.
const byteOrderMagic uint32 = 0x1a2b3c4d

// Interface Description Block option codes.
const (
	optEndOfOpt = 0
	optTSResol  = 9
	optTSOffset = 14
)

// blockName returns a human-readable name of a pcapng block type, for error
// messages.
func blockName(typ uint32) string {
	switch typ {
	case blockSHB:
		return "section header block"
	case blockIDB:
		return "interface description block"
	case blockPB:
		return "packet block"
	case blockSPB:
		return "simple packet block"
	case blockNRB:
		return "name resolution block"
	case blockISB:
		return "interface statistics block"
	case blockEPB:
		return "enhanced packet block"
	case blockDSB:
		return "decryption secrets block"
	}
	return fmt.Sprintf("block of type %#x", typ)
}

// minLen returns the smallest valid total length of a block of type typ.
func minLen(typ uint32) uint32 {
	switch typ {
	case blockSHB:
		return minSHBLen
	case blockIDB:
		return minIDBLen
	case blockPB:
		return minPBLen
	case blockSPB:
		return minSPBLen
	case blockEPB:
		return minEPBLen
	}
	return minBlockLen
}

// block tracks the body of the pcapng block being read: the bytes between
// the leading block length and the trailing one.
type block struct {
	r      *Reader
	typ    uint32
	start  int64  // file offset of the block
	total  uint32 // total block length
	remain int    // body bytes not yet consumed
}

// beginBlock checks the total length of a block of type typ starting at
// offset start, whose type and leading length (and, for a Section Header
// Block, byte-order magic) have been read, and returns a block positioned
// after the bytes consumed so far.
func (r *Reader) beginBlock(start int64, typ, total uint32) (block, error) {
	if least := minLen(typ); total < least {
		return block{}, &Error{Offset: start, Msg: fmt.Sprintf("%s length %d less than minimum %d", blockName(typ), total, least)}
	}
	if total%4 != 0 {
		return block{}, &Error{Offset: start, Msg: fmt.Sprintf("%s length %d not a multiple of 4", blockName(typ), total)}
	}
	if total > MaxBlockLen {
		return block{}, &Error{Offset: start, Msg: fmt.Sprintf("%s length %d exceeds maximum %d", blockName(typ), total, MaxBlockLen)}
	}
	// The body is what lies between the leading and the trailing length;
	// the caller has consumed r.off-start-8 bytes of it already.
	consumed := int(r.off - start - 8)
	return block{r: r, typ: typ, start: start, total: total, remain: int(total) - minBlockLen - consumed}, nil
}

// tooShort returns the error for a block whose fields overrun its length.
func (b *block) tooShort(what string) error {
	return &Error{Offset: b.start, Msg: fmt.Sprintf("%s overruns %s of length %d", what, blockName(b.typ), b.total)}
}

// readError converts an error from the underlying reader into an *Error
// about the block.
func (b *block) readError(err error) error {
	return readError(err, b.start, blockName(b.typ))
}

// read reads len(p) bytes, at most bufferSize, of the block body; what
// names them in the error if the block is too short to hold them.
func (b *block) read(p []byte, what string) error {
	if len(p) > b.remain {
		return b.tooShort(what)
	}
	b.remain -= len(p)
	if _, err := b.r.readFixed(p); err != nil {
		return b.readError(err)
	}
	return nil
}

// readData reads len(p) bytes of packet data from the block body.
func (b *block) readData(p []byte) error {
	if len(p) > b.remain {
		return b.tooShort("packet data")
	}
	b.remain -= len(p)
	if err := b.r.readData(p); err != nil {
		return b.readError(err)
	}
	return nil
}

// skip discards n bytes of the block body.
func (b *block) skip(n int, what string) error {
	if n > b.remain {
		return b.tooShort(what)
	}
	b.remain -= n
	if err := b.r.skip(n); err != nil {
		return b.readError(err)
	}
	return nil
}

// finish discards the rest of the block body and checks that the trailing
// block length equals the leading one.
func (b *block) finish() error {
	if err := b.skip(b.remain, "trailer"); err != nil {
		return err
	}
	var t [4]byte
	if _, err := b.r.readFixed(t[:]); err != nil {
		return b.readError(err)
	}
	if trail := b.r.order.Uint32(t[:]); trail != b.total {
		return &Error{Offset: b.start, Msg: fmt.Sprintf("%s trailing length %d does not match leading length %d", blockName(b.typ), trail, b.total)}
	}
	return nil
}

// readFirstSection reads the Section Header Block that starts a pcapng file.
func (r *Reader) readFirstSection() error {
	var h [8]byte
	if _, err := r.readFixed(h[:]); err != nil {
		return readError(err, 0, "section header block")
	}
	return r.readSection(0, h)
}

// readSection reads the rest of a Section Header Block starting at offset
// start, whose first 8 bytes (block type and length) are in h. It sets the
// byte order of the new section and forgets the interfaces of the previous
// one.
func (r *Reader) readSection(start int64, h [8]byte) error {
	var m [4]byte
	if _, err := r.readFixed(m[:]); err != nil {
		return readError(err, start, "section header block")
	}
	switch byteOrderMagic {
	case littleEndian.Uint32(m[:]):
		r.order = littleEndian
	case bigEndian.Uint32(m[:]):
		r.order = bigEndian
	default:
		return &Error{Offset: start, Msg: fmt.Sprintf("bad byte-order magic %#08x in section header block", bigEndian.Uint32(m[:]))}
	}
	b, err := r.beginBlock(start, blockSHB, r.order.Uint32(h[4:]))
	if err != nil {
		return err
	}
	// Version major and minor, then a 64-bit section length that may be -1
	// and is not needed to read the section sequentially.
	var f [12]byte
	if err := b.read(f[:], "section header"); err != nil {
		return err
	}
	if major, minor := r.order.Uint16(f[0:]), r.order.Uint16(f[2:]); major != 1 {
		return &Error{Offset: start, Msg: fmt.Sprintf("unsupported pcapng version %d.%d", major, minor)}
	}
	if err := b.finish(); err != nil {
		return err
	}
	r.ifaces = r.ifaces[:0]
	return nil
}

// nextPcapng reads blocks until it finds one holding a packet.
func (r *Reader) nextPcapng() (Packet, error) {
	for {
		start := r.off
		var h [8]byte
		if err := r.readHeader(h[:], "block header"); err != nil {
			return Packet{}, err
		}
		typ := r.order.Uint32(h[0:])
		if typ == blockSHB {
			if err := r.readSection(start, h); err != nil {
				return Packet{}, err
			}
			continue
		}
		b, err := r.beginBlock(start, typ, r.order.Uint32(h[4:]))
		if err != nil {
			return Packet{}, err
		}
		switch typ {
		case blockIDB:
			err = r.readIDB(&b)
		case blockEPB:
			return r.readEPB(&b)
		case blockPB:
			return r.readPB(&b)
		case blockSPB:
			return r.readSPB(&b)
		default:
			err = b.finish()
		}
		if err != nil {
			return Packet{}, err
		}
	}
}
