package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// rsockets' iomaps (librdmacm's riomap, riounmap, riowrite). Each side
// may keep a target iomap: an array of rs_iomap entries placed right
// after its two-entry target SGL array, in the same registered region,
// whose size it announces in rs_conn_data's target_iomap_size (with
// RS_CONN_FLAG_IOMAP set). riomap registers a buffer and writes an entry
// naming it into the peer's array, with an RDMA WRITE WITH IMMEDIATE
// whose immediate is RS_OP_IOMAP_SGL and the entry's index; the peer's
// riowrite then writes straight into that buffer at an offset the
// mapping chose, with plain RDMA WRITEs that carry no immediate, so the
// buffer's owner learns of them only from the data itself.

// iomapLen is the length of struct rs_iomap: offset (8), then an rs_sge.
const iomapLen = 8 + sgeLen

// MaxIOMapSize is the largest Config.IOMapSize: target_iomap_size is one
// byte, a count up to 128 or, with the top bit set, a count of 256s.
const MaxIOMapSize = 127 << 8

// Protections IOMap takes (PROT_NONE, PROT_WRITE).
const (
	ProtNone  = 0x0
	ProtWrite = 0x2
)

// IOMapEntry is struct rs_iomap: a buffer of one side, named by the
// offset the other side's riowrite gives, and where it lies.
type IOMapEntry struct {
	Offset uint64
	SGE
}

// PutIOMapEntry writes e's 24 bytes to b in byte order o, as a side
// writes an entry into its peer's target iomap (in the peer's order).
func PutIOMapEntry(o binary.ByteOrder, b []byte, e IOMapEntry) {
	o.PutUint64(b, e.Offset)
	putSGE(o, b[8:], e.SGE)
}

// ParseIOMapEntry reads an entry from the start of b in byte order o.
func ParseIOMapEntry(o binary.ByteOrder, b []byte) (IOMapEntry, error) {
	if len(b) < iomapLen {
		return IOMapEntry{}, fmt.Errorf("rsocket: an iomap entry is %d bytes, not %d: %w", iomapLen, len(b), syscall.EPROTO)
	}
	return IOMapEntry{Offset: o.Uint64(b), SGE: getSGE(o, b[8:])}, nil
}

// valueToScale is rs_value_to_scale for target_iomap_size's 8 bits.
func valueToScale(v int) uint8 {
	if v <= 1<<7 {
		return uint8(v)
	}
	return uint8(1<<7 | v>>8)
}

// scaleToValue is rs_scale_to_value, its inverse.
func scaleToValue(s uint8) int {
	if s <= 1<<7 {
		return int(s)
	}
	return int(s&^(1<<7)) << 8
}

// iomapSize is the size of the target iomap cfg asks for, rounded as
// RDMA_IOMAPSIZE rounds it.
func (cfg *Config) iomapSize() int {
	v := min(cfg.IOMapSize, MaxIOMapSize)
	if v <= 0 {
		return 0
	}
	return scaleToValue(valueToScale(v))
}

// iomaps is a connection's iomap state: this side's mappings (C's
// iomap_list and remote_iomappings) and the entries the peer wrote into
// this side's target iomap, copied when their message came.
type iomaps struct {
	remote SGE          // the peer's target iomap (remote_iomap); Length is its entries
	local  []*localMap  // this side's mappings
	used   []bool       // the peer's entries that one of local names
	next   int          // where the search for a free entry starts
	peer   []IOMapEntry // this side's target iomap as the peer wrote it
}

// localMap is one IOMap (struct rs_iomap_mr).
type localMap struct {
	mr     *verbs.MR
	offset int64
	index  int // the entry of the peer's target iomap, -1 for a local mapping
}

// initIOMaps takes the peer's iomap from its connection data
// (rs_save_conn_data).
func (c *Conn) initIOMaps(peer ConnData) {
	c.iom.peer = make([]IOMapEntry, c.iomapSize)
	if peer.Flags&connFlagIOMap == 0 {
		return
	}
	n := scaleToValue(peer.IOMapSize)
	c.iom.remote = SGE{Addr: peer.TargetSGL.Addr + uint64(sgeLen)*uint64(peer.TargetSGL.Length), Key: peer.TargetSGL.Key, Length: uint32(n)}
	c.iom.used = make([]bool, n)
}

// iomapWritten takes an RS_OP_IOMAP_SGL message: the peer wrote entry i
// of this side's target iomap, which RC ordering put in memory before
// the message's completion. An index out of range or a write of the
// wrong length is ignored, as rsockets ignores the message.
//
// The message took one of the peer's credits. rsockets never gives it
// back, so that each riomap shrinks the peer's window for good, and a
// connection stalls after as many riomaps as its receive queue holds;
// this side gives it back with the next credit update, as it does for
// a data message read, which is safe as its receive was reposted.
func (c *Conn) iomapWritten(i, n uint32) {
	c.rseqNo++
	if n != iomapLen || int(i) >= len(c.iom.peer) {
		return
	}
	e, err := ParseIOMapEntry(binary.LittleEndian, c.tmr.Buf()[sglSize*sgeLen+int(i)*iomapLen:])
	if err == nil {
		c.iom.peer[i] = e
	}
}

// releaseIOMaps deregisters every mapping (rs_free_iomappings).
func (c *Conn) releaseIOMaps() {
	for _, m := range c.iom.local {
		m.mr.Dereg()
	}
	c.iom.local = nil
}

// Errors of the iomap calls.
var (
	// ErrNoIOMap is IOMap's error when the peer keeps no target iomap,
	// or every entry of it is taken.
	ErrNoIOMap = errors.New("rsocket: no free entry in the peer's iomap (the peer's RDMA_IOMAPSIZE)")
	// ErrNotMapped is IOWrite's error for an offset no mapping of the
	// peer covers.
	ErrNotMapped = errors.New("rsocket: no iomap of the peer covers the offset")
)

// IOMap maps buf for the peer's riowrite (riomap): it registers buf and,
// with prot ProtWrite, names it in an entry of the peer's target iomap,
// so that the peer's IOWrite (or C's riowrite) at offsets [offset,
// offset+len(buf)) lands in buf. An offset of -1 maps buf at its own
// address. It returns the offset. The peer's writes come with no
// notice: the program learns of them from the data (rdma-core's
// riostream watches the buffer's last byte), and must not touch buf
// while they may come. buf stays mapped until IOUnmap or Close.
//
// With ProtWrite the connection must be usable and the peer must keep
// a target iomap with a free entry (its Config.IOMapSize or
// RDMA_IOMAPSIZE), else the error wraps ErrNoIOMap. ProtNone only
// registers buf, as riomap does. Each mapping's message takes one of
// the peer's credits, as a Write's does; the peer gives it back as it
// takes its completions, in a Read or Write (or, if it makes neither, at
// its next keepalive look, within 2 s), as rsockets' peers do in rrecv
// and rsend.
func (c *Conn) IOMap(buf []byte, prot int, offset int64) (int64, error) {
	if c == nil || c.rc == nil {
		return -1, &net.OpError{Op: "riomap", Net: "rsocket", Err: syscall.EBADF}
	}
	switch {
	case prot&^ProtWrite != 0:
		return -1, c.opError("riomap", fmt.Errorf("protection %#x: want ProtNone or ProtWrite: %w", prot, syscall.EINVAL))
	case len(buf) == 0:
		return -1, c.opError("riomap", fmt.Errorf("an empty buffer: %w", syscall.EINVAL))
	case offset < -1:
		return -1, c.opError("riomap", fmt.Errorf("offset %d: %w", offset, syscall.EINVAL))
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(c.wdl); err != nil {
		return -1, c.opError("riomap", err)
	}
	if !c.writable {
		return -1, c.opError("riomap", c.writeErr())
	}
	index := -1
	access := verbs.AccessLocalWrite
	if prot&ProtWrite != 0 {
		// Entries are taken in turn, not lowest first. rsockets does
		// not tell when the peer has read an entry, so an entry used
		// again is written while the peer may still be reading the
		// message that wrote it last; in turn, that takes as many
		// mappings as the peer's iomap has entries.
		for k := range c.iom.used {
			i := (c.iom.next + k) % len(c.iom.used)
			if !c.iom.used[i] {
				index = i
				c.iom.next = i + 1
				break
			}
		}
		if index < 0 {
			return -1, c.opError("riomap", fmt.Errorf("%w: it has %d entries", ErrNoIOMap, len(c.iom.used)))
		}
		access |= verbs.AccessRemoteWrite
	}
	mr, err := c.rc.PD.RegMR(buf, access)
	if err != nil {
		return -1, c.opError("riomap", err)
	}
	if offset == -1 {
		offset = int64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	}
	m := &localMap{mr: mr, offset: offset, index: index}
	if index >= 0 {
		// rsockets sends the entry with the next rsend or riowrite; it
		// goes now here, so the peer has it before anything after.
		if err := c.sendIOMap(m); err != nil {
			mr.Dereg()
			return -1, c.opError("riomap", err)
		}
		c.iom.used[index] = true
	}
	c.iom.local = append(c.iom.local, m)
	return offset, nil
}

// sendIOMap writes m's entry into the peer's target iomap
// (rs_send_iomaps, rs_write_iomap): an RDMA WRITE WITH IMMEDIATE of 24
// bytes, in the peer's byte order, that takes a credit as a data
// message does.
func (c *Conn) sendIOMap(m *localMap) error {
	var since time.Time
	for !c.canSend() {
		if !c.writable {
			return c.writeErr()
		}
		if err := c.wait(c.wdl, &since); err != nil {
			return err
		}
		if c.closing {
			return net.ErrClosed
		}
	}
	var o binary.ByteOrder = binary.LittleEndian
	if c.peerBE {
		o = binary.BigEndian
	}
	var e [iomapLen]byte
	PutIOMapEntry(o, e[:], IOMapEntry{Offset: uint64(m.offset), SGE: SGE{Addr: m.mr.Addr(), Key: m.mr.RKey(), Length: uint32(m.mr.Len())}})
	sgl := c.stage(e[:])
	c.sseqNo++
	imm := msg(opIOMap, uint32(m.index))
	wr := verbs.SendWR{
		// The local tag is a write's, so that the completion gives back
		// the entry's room in the send buffer.
		WRID: uint64(msg(opWrite, iomapLen)), Opcode: verbs.WRRDMAWriteWithImm, ImmData: imm, SGList: sgl,
		RemoteAddr: c.iom.remote.Addr + uint64(m.index)*iomapLen, RKey: c.iom.remote.Key,
	}
	if c.inline >= iomapLen {
		wr.SendFlags = verbs.SendInline
	}
	c.post(wr)
	return c.err
}

// stage copies p to the head of the send buffer, wrapping around its
// end, takes its room and a send queue entry, and returns the SGEs that
// name it.
func (c *Conn) stage(p []byte) []verbs.SGE {
	buf := c.smr.Buf()[:c.sbufSize]
	sges := &c.sgeBuf
	sgl := sges[:1]
	n := len(p)
	if k := c.sbufSize - c.sbufHead; k < n {
		copy(buf[c.sbufHead:], p[:k])
		copy(buf, p[k:])
		sges[0] = c.smr.SGE(c.sbufHead, k)
		sges[1] = c.smr.SGE(0, n-k)
		sgl = sges[:2]
	} else {
		copy(buf[c.sbufHead:], p)
		sges[0] = c.smr.SGE(c.sbufHead, n)
	}
	c.sbufHead = (c.sbufHead + n) % c.sbufSize
	c.sqeAvail--
	c.sbufAvail -= n
	return sgl
}

// IOUnmap undoes the IOMap of buf (riounmap): buf must be the slice
// IOMap was given, same start and length. The entry in the peer's
// target iomap is not cleared (rsockets does not tell the peer); the
// peer's writes to it fail, and end the connection, once the
// registration is gone, and the entry is taken by the next IOMap.
func (c *Conn) IOUnmap(buf []byte) error {
	if c == nil || c.rc == nil {
		return &net.OpError{Op: "riounmap", Net: "rsocket", Err: syscall.EBADF}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	for i, m := range c.iom.local {
		if m.mr.Addr() == addr && m.mr.Len() == len(buf) {
			m.mr.Dereg()
			if m.index >= 0 {
				c.iom.used[m.index] = false
			}
			c.iom.local = append(c.iom.local[:i], c.iom.local[i+1:]...)
			return nil
		}
	}
	return c.opError("riounmap", fmt.Errorf("%d bytes at %#x are not mapped: %w", len(buf), addr, syscall.EINVAL))
}

// findIOMap returns the entry of this side's target iomap that covers
// off (rs_find_iomap).
func (c *Conn) findIOMap(off uint64) (IOMapEntry, bool) {
	for _, e := range c.iom.peer {
		if e.Length != 0 && off >= e.Offset && off-e.Offset < uint64(e.Length) {
			return e, true
		}
	}
	return IOMapEntry{}, false
}

// IOWrite writes p into the peer's memory at offset, in the buffers the
// peer mapped with IOMap or riomap (riowrite): RDMA WRITEs without
// immediate, copied through the send buffer (or inline), in chunks as
// Write's. It returns once all of p is posted; the peer is not told.
// Data written with Write afterwards reaches the peer after it.
//
// An offset that no mapping of the peer covers, where p starts or where
// it runs on to, ends the call with an error wrapping ErrNotMapped and
// the count of bytes posted before it.
func (c *Conn) IOWrite(p []byte, offset int64) (int, error) {
	if c == nil || c.rc == nil {
		return 0, &net.OpError{Op: "riowrite", Net: "rsocket", Err: syscall.EBADF}
	}
	if offset < 0 {
		return 0, c.opError("riowrite", fmt.Errorf("offset %d: %w", offset, syscall.EINVAL))
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(c.wdl); err != nil {
		return 0, c.opError("riowrite", err)
	}
	n := 0
	var since time.Time // when the call first polled since it last sent (spin)
	var e IOMapEntry
	have := false
	for n < len(p) {
		off := uint64(offset) + uint64(n)
		if !have || off < e.Offset || off-e.Offset >= uint64(e.Length) {
			if e, have = c.findIOMap(off); !have {
				return n, c.opError("riowrite", fmt.Errorf("%w: %d (%d mapped)", ErrNotMapped, off, c.mappedByPeer()))
			}
		}
		if c.closing {
			return n, c.opError("riowrite", net.ErrClosed)
		}
		if !c.writable {
			return n, c.opError("riowrite", c.writeErr())
		}
		if !c.canSend() {
			if err := c.wait(c.wdl, &since); err != nil {
				return n, c.opError("riowrite", err)
			}
			continue
		}
		// Chunks as large as they may be, as Write's are.
		size := min(len(p)-n, maxTransfer, c.sbufAvail, int(min(uint64(e.Length)-(off-e.Offset), 1<<30)))
		sgl := c.stage(p[n : n+size])
		wr := verbs.SendWR{
			WRID: uint64(msg(opWrite, uint32(size))), Opcode: verbs.WRRDMAWrite, SGList: sgl,
			RemoteAddr: e.Addr + (off - e.Offset), RKey: e.Key,
		}
		if size <= c.inline {
			wr.SendFlags = verbs.SendInline
		}
		c.post(wr)
		n += size
		since = time.Time{}
	}
	return n, nil
}

// mappedByPeer counts the peer's live entries, for IOWrite's error.
func (c *Conn) mappedByPeer() int {
	k := 0
	for _, e := range c.iom.peer {
		if e.Length != 0 {
			k++
		}
	}
	return k
}
