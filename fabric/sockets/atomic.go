package sockets

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/rdmago/rdmago/fabric"
)

// Atomics (FI_ATOMIC), as C's sockets provider sends them: after the
// header, a struct sock_op (8 bytes: op, source count, target count, and
// the atomic's op, datatype, result count and compare count), CQ data if
// any, the target ranges as struct fi_rma_ioc (address, element count,
// key), the compare operand, then the operand. The target applies the
// operation element by element and answers ATOMIC_COMPLETE, with the
// target's prior elements when the request has a result, or ATOMIC_ERROR.
// Operands are in the host's byte order (little-endian here).

const (
	sockOpLen = 8
	maxAtomic = 4096 // SOCK_EP_MAX_ATOMIC_SZ: the most bytes of elements in one request
)

// atomicKind is which of the three calls an operation is made with.
type atomicKind int

const (
	plainAtomic atomicKind = iota
	fetchAtomic
	compareAtomic
)

// integer reports whether dt is one of the integer datatypes.
func integer(dt fabric.Datatype) bool { return dt >= fabric.Int8 && dt <= fabric.Uint64 }

// validAtomic says whether this provider does op on dt with the given
// call, and how many elements it takes at once. It offers the integer
// and floating-point datatypes (not the complex ones or long double).
func validAtomic(kind atomicKind, dt fabric.Datatype, op fabric.AtomicOp) (int, error) {
	names := [...]string{"fi_atomicvalid", "fi_fetch_atomicvalid", "fi_compare_atomicvalid"}
	if !integer(dt) && dt != fabric.Float && dt != fabric.Double {
		return 0, fabric.Errorf(names[kind], fabric.ErrNotSupported, dt.String()+" is not offered")
	}
	ok := false
	switch op {
	case fabric.OpMin, fabric.OpMax, fabric.OpSum, fabric.OpProd, fabric.OpAtomicWrite:
		ok = kind != compareAtomic
	case fabric.OpLOr, fabric.OpLAnd, fabric.OpBOr, fabric.OpBAnd, fabric.OpLXor, fabric.OpBXor:
		ok = kind != compareAtomic && integer(dt)
	case fabric.OpAtomicRead:
		ok = kind == fetchAtomic
	case fabric.OpCSwap, fabric.OpCSwapNE, fabric.OpCSwapLE, fabric.OpCSwapLT, fabric.OpCSwapGE, fabric.OpCSwapGT:
		ok = kind == compareAtomic
	case fabric.OpMSwap:
		ok = kind == compareAtomic && integer(dt)
	}
	if !ok {
		return 0, fabric.Errorf(names[kind], fabric.ErrNotSupported, op.String()+" on "+dt.String()+" is not offered with this call")
	}
	return maxAtomic / dt.Size(), nil
}

func (e *ep) AtomicValid(dt fabric.Datatype, op fabric.AtomicOp) (int, error) {
	return validAtomic(plainAtomic, dt, op)
}

func (e *ep) FetchAtomicValid(dt fabric.Datatype, op fabric.AtomicOp) (int, error) {
	return validAtomic(fetchAtomic, dt, op)
}

func (e *ep) CompareAtomicValid(dt fabric.Datatype, op fabric.AtomicOp) (int, error) {
	return validAtomic(compareAtomic, dt, op)
}

// atomic sends an atomic request: buf's elements (none for
// OpAtomicRead), compare's if any, the prior elements landing in result
// if it is not nil.
func (e *ep) atomic(name string, kind atomicKind, buf, compare, result []byte, dest fabric.Addr, addr, key uint64,
	dt fabric.Datatype, op fabric.AtomicOp, context any) error {
	if err := e.noRMA(name); err != nil {
		return err
	}
	max, err := validAtomic(kind, dt, op)
	if err != nil {
		return err
	}
	n := len(buf)
	if op == fabric.OpAtomicRead {
		n = len(result)
	}
	switch size := dt.Size(); {
	case n == 0 || n%size != 0 || n/size > max:
		return fabric.Errorf(name, fabric.ErrInvalid, fmt.Sprintf("%d bytes: want 1 to %d whole %s elements", n, max, dt))
	case compare != nil && len(compare) != n, result != nil && len(result) != n:
		return fabric.Errorf(name, fabric.ErrInvalid, "the compare and result buffers must hold as many elements as buf")
	}
	count := uint64(n / dt.Size())
	sop := [sockOpLen]byte{opAtomic, 0, 1, byte(op), byte(dt), 0, 0, 0}
	var parts [][]byte
	var iov [iovLen]byte
	rmaIOV{addr, count, key}.put(iov[:])
	parts = append(parts, sop[:], iov[:])
	if compare != nil {
		sop[6] = 1
		parts = append(parts, compare)
	}
	if op != fabric.OpAtomicRead {
		sop[1] = 1
		parts = append(parts, buf)
	}
	w := &waiter{ctx: context, flags: fabric.CompAtomic | fabric.CompWrite, report: true}
	if result != nil {
		sop[5] = 1
		w.buf, w.flags = result, fabric.CompAtomic|fabric.CompRead
	}
	h := header{op: opAtomic, destIOVLen: 1}
	return e.post(name, dest, h, parts, &txReq{ctx: context, flags: w.flags}, w)
}

// Atomic applies op with buf's elements to the target (fi_atomic).
func (e *ep) Atomic(buf []byte, _ any, dest fabric.Addr, addr, key uint64, dt fabric.Datatype, op fabric.AtomicOp, context any) error {
	return e.atomic("fi_atomic", plainAtomic, buf, nil, nil, dest, addr, key, dt, op, context)
}

// FetchAtomic is Atomic with the target's prior elements in result
// (fi_fetch_atomic).
func (e *ep) FetchAtomic(buf []byte, _ any, result []byte, _ any, dest fabric.Addr, addr, key uint64, dt fabric.Datatype, op fabric.AtomicOp, context any) error {
	if op == fabric.OpAtomicRead {
		buf = nil
	}
	return e.atomic("fi_fetch_atomic", fetchAtomic, buf, nil, result, dest, addr, key, dt, op, context)
}

// CompareAtomic swaps buf's elements in where the target compares with
// compare's as op says, the prior elements in result (fi_compare_atomic).
func (e *ep) CompareAtomic(buf []byte, _ any, compare []byte, _ any, result []byte, _ any, dest fabric.Addr, addr, key uint64,
	dt fabric.Datatype, op fabric.AtomicOp, context any) error {
	if compare == nil {
		return fabric.Errorf("fi_compare_atomic", fabric.ErrInvalid, "no compare buffer")
	}
	return e.atomic("fi_compare_atomic", compareAtomic, buf, compare, result, dest, addr, key, dt, op, context)
}

// receiveAtomic is the target's side of an atomic request.
func (e *ep) receiveAtomic(c *conn, r *bufio.Reader, h header) error {
	var sop [sockOpLen]byte
	if _, err := io.ReadFull(r, sop[:]); err != nil {
		return err
	}
	read := uint64(hdrLen + sockOpLen)
	var cqData uint64
	hasCQ := h.flags&flagRemoteCQData != 0
	if hasCQ {
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return err
		}
		cqData = binary.LittleEndian.Uint64(b[:])
		read += 8
	}
	nIOV, op, dt := int(sop[2]), fabric.AtomicOp(sop[3]), fabric.Datatype(sop[4])
	fetch, withCmp, withSrc := sop[5] != 0, sop[6] != 0, sop[1] != 0 && op != fabric.OpAtomicRead
	if nIOV > maxIOV || read+uint64(nIOV*iovLen) > h.msgLen {
		return fmt.Errorf("%w: atomic with %d targets in %d bytes", errWire, nIOV, h.msgLen)
	}
	v, err := readIOVs(r, nIOV)
	if err != nil {
		return err
	}
	read += uint64(nIOV * iovLen)
	size := uint64(dt.Size())
	var total uint64
	for _, x := range v {
		total += x.len * size // x.len is an element count here
		if x.len > maxAtomic || total > maxAtomic {
			total = maxAtomic + 1
			break
		}
	}
	refuse := func(errno fabric.Errno) error {
		if err := discard(r, h.msgLen-min(read, h.msgLen)); err != nil {
			return err
		}
		e.respond(c, opAtomicError, h, errno, nil)
		return nil
	}
	kind := plainAtomic
	switch {
	case withCmp:
		kind = compareAtomic
	case fetch:
		kind = fetchAtomic
	}
	if size == 0 || total > maxAtomic {
		return refuse(fabric.ErrInvalid)
	}
	if _, err := validAtomic(kind, dt, op); err != nil {
		return refuse(fabric.ErrNotSupported)
	}
	var cmp, src []byte
	if withCmp {
		if cmp, err = readN(r, total); err != nil {
			return err
		}
		read += total
	}
	if withSrc {
		if src, err = readN(r, total); err != nil {
			return err
		}
		read += total
	}
	if read > h.msgLen {
		return fmt.Errorf("%w: atomic operands past the message's %d bytes", errWire, h.msgLen)
	}
	if err := discard(r, h.msgLen-read); err != nil {
		return err
	}
	for i := range v {
		v[i].len *= size // in bytes, for the region's check
	}
	dst, ok := e.regions(v, fabric.AccessRemoteWrite)
	if !ok {
		e.respond(c, opAtomicError, h, fabric.ErrAccess, nil)
		return nil
	}
	result := make([]byte, total)
	off := 0
	for _, d := range dst {
		n := len(d)
		var s, k []byte
		if src != nil {
			s = src[off : off+n]
		}
		if cmp != nil {
			k = cmp[off : off+n]
		}
		applyAtomic(dt, op, d, s, k, result[off:off+n])
		off += n
	}
	if hasCQ {
		e.Comp.Done(fabric.CQEntry{Flags: fabric.CompAtomic | fabric.CompRemoteWrite | fabric.CompRemoteCQData, Data: cqData})
	} else if op == fabric.OpAtomicRead {
		e.Comp.Count(fabric.CompRemoteRead)
	} else {
		e.Comp.Count(fabric.CompRemoteWrite)
	}
	var data [][]byte
	if fetch {
		data = [][]byte{result}
	}
	e.respond(c, opAtomicDone, h, 0, data)
	return nil
}

// applyAtomic applies op to the elements of dst with those of src and
// cmp, leaving dst's prior elements in result.
func applyAtomic(dt fabric.Datatype, op fabric.AtomicOp, dst, src, cmp, result []byte) {
	size := dt.Size()
	copy(result, dst)
	for i := 0; i+size <= len(dst); i += size {
		d := dst[i : i+size]
		var s, k []byte
		if src != nil {
			s = src[i : i+size]
		}
		if cmp != nil {
			k = cmp[i : i+size]
		}
		switch {
		case dt == fabric.Float || dt == fabric.Double:
			applyFloat(dt, op, d, s, k)
		default:
			applyInt(dt, op, d, s, k)
		}
	}
}

// getInt reads one element as a signed and as an unsigned 64-bit value.
func getInt(dt fabric.Datatype, b []byte) (signed int64, unsigned uint64) {
	switch dt {
	case fabric.Int8:
		return int64(int8(b[0])), uint64(b[0])
	case fabric.Uint8:
		return int64(b[0]), uint64(b[0])
	case fabric.Int16:
		v := binary.LittleEndian.Uint16(b)
		return int64(int16(v)), uint64(v)
	case fabric.Uint16:
		v := binary.LittleEndian.Uint16(b)
		return int64(v), uint64(v)
	case fabric.Int32:
		v := binary.LittleEndian.Uint32(b)
		return int64(int32(v)), uint64(v)
	case fabric.Uint32:
		v := binary.LittleEndian.Uint32(b)
		return int64(v), uint64(v)
	}
	v := binary.LittleEndian.Uint64(b)
	return int64(v), v
}

func putInt(b []byte, v uint64) {
	switch len(b) {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

func signedType(dt fabric.Datatype) bool {
	return dt == fabric.Int8 || dt == fabric.Int16 || dt == fabric.Int32 || dt == fabric.Int64
}

func applyInt(dt fabric.Datatype, op fabric.AtomicOp, d, s, k []byte) {
	ds, du := getInt(dt, d)
	var ss, ks int64
	var suu, kuu uint64
	if s != nil {
		ss, suu = getInt(dt, s)
	}
	if k != nil {
		ks, kuu = getInt(dt, k)
	}
	// less reports d < x in the datatype's order.
	less := func(xs int64, xu uint64) bool {
		if signedType(dt) {
			return ds < xs
		}
		return du < xu
	}
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	out, write := du, true
	switch op {
	case fabric.OpMin:
		if less(ss, suu) {
			write = false
		} else {
			out = suu
		}
	case fabric.OpMax:
		if !less(ss, suu) {
			write = false
		} else {
			out = suu
		}
	case fabric.OpSum:
		out = du + suu
	case fabric.OpProd:
		out = du * suu
	case fabric.OpLOr:
		out = b2u(du != 0 || suu != 0)
	case fabric.OpLAnd:
		out = b2u(du != 0 && suu != 0)
	case fabric.OpLXor:
		out = b2u((du != 0) != (suu != 0))
	case fabric.OpBOr:
		out = du | suu
	case fabric.OpBAnd:
		out = du & suu
	case fabric.OpBXor:
		out = du ^ suu
	case fabric.OpAtomicRead:
		write = false
	case fabric.OpAtomicWrite:
		out = suu
	case fabric.OpMSwap:
		out = suu&kuu | du&^kuu
	default: // the compare-and-swaps: swap where the comparison of cmp with d holds
		eq := du == kuu
		var cLess bool // cmp < d
		if signedType(dt) {
			cLess = ks < ds
		} else {
			cLess = kuu < du
		}
		var swap bool
		switch op {
		case fabric.OpCSwap:
			swap = eq
		case fabric.OpCSwapNE:
			swap = !eq
		case fabric.OpCSwapLE:
			swap = cLess || eq
		case fabric.OpCSwapLT:
			swap = cLess
		case fabric.OpCSwapGE:
			swap = !cLess
		case fabric.OpCSwapGT:
			swap = !cLess && !eq
		}
		write, out = swap, suu
	}
	if write {
		putInt(d, out)
	}
}

func applyFloat(dt fabric.Datatype, op fabric.AtomicOp, d, s, k []byte) {
	get := func(b []byte) float64 {
		if dt == fabric.Float {
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	put := func(b []byte, v float64) {
		if dt == fabric.Float {
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
		} else {
			binary.LittleEndian.PutUint64(b, math.Float64bits(v))
		}
	}
	dv := get(d)
	var sv, kv float64
	if s != nil {
		sv = get(s)
	}
	if k != nil {
		kv = get(k)
	}
	switch op {
	case fabric.OpMin:
		if sv < dv {
			put(d, sv)
		}
	case fabric.OpMax:
		if sv > dv {
			put(d, sv)
		}
	case fabric.OpSum:
		put(d, dv+sv)
	case fabric.OpProd:
		put(d, dv*sv)
	case fabric.OpAtomicWrite:
		put(d, sv)
	case fabric.OpCSwap, fabric.OpCSwapNE, fabric.OpCSwapLE, fabric.OpCSwapLT, fabric.OpCSwapGE, fabric.OpCSwapGT:
		var swap bool
		switch op {
		case fabric.OpCSwap:
			swap = kv == dv
		case fabric.OpCSwapNE:
			swap = kv != dv
		case fabric.OpCSwapLE:
			swap = kv <= dv
		case fabric.OpCSwapLT:
			swap = kv < dv
		case fabric.OpCSwapGE:
			swap = kv >= dv
		case fabric.OpCSwapGT:
			swap = kv > dv
		}
		if swap {
			put(d, sv)
		}
	}
}
