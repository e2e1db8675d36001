package vrb

import (
	"encoding/binary"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/verbs"
)

// The atomics of C's verbs provider, on the verbs' own: one 64-bit
// element at a time; OpAtomicWrite as an RDMA WRITE, OpAtomicRead as an
// RDMA READ, OpSum as FETCH_AND_ADD and OpCSwap as CMP_AND_SWP, each
// fenced behind the reads and atomics before it. The others are
// ErrNoSys, as in C.

// atomicKind is which of the three families an operation belongs to.
type atomicKind int

const (
	plainAtomic atomicKind = iota
	fetchAtomic
	compareAtomic
)

func validAtomic(kind atomicKind, dt fabric.Datatype, op fabric.AtomicOp) (int, error) {
	ok := false
	switch kind {
	case plainAtomic:
		ok = op == fabric.OpAtomicWrite
	case fetchAtomic:
		ok = op == fabric.OpAtomicRead || op == fabric.OpSum
	case compareAtomic:
		ok = op == fabric.OpCSwap
	}
	if !ok {
		return 0, fabric.Errorf("fi_atomicvalid", fabric.ErrNoSys, "the verbs provider has no "+op.String()+" in this form")
	}
	if dt != fabric.Int64 && dt != fabric.Uint64 {
		return 0, fabric.Errorf("fi_atomicvalid", fabric.ErrInvalid, "the verbs provider's atomics take FI_INT64 and FI_UINT64, not "+dt.String())
	}
	return 1, nil
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

// operand checks that b holds one 64-bit element and returns it.
func operand(name, what string, b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fabric.Errorf(name, fabric.ErrTooBig, what+" must hold one 64-bit element")
	}
	return binary.NativeEndian.Uint64(b), nil
}

var (
	atomicWriteOp = op{flags: fabric.CompAtomic | fabric.CompWrite}
	atomicReadOp  = op{flags: fabric.CompAtomic | fabric.CompRead}
)

// Atomic is fi_atomic: OpAtomicWrite of one 64-bit element
// (IBV_WR_RDMA_WRITE of 8 bytes).
func (e *ep) Atomic(buf []byte, desc any, _ fabric.Addr, addr, key uint64, dt fabric.Datatype, aop fabric.AtomicOp, context any) error {
	const name = "fi_atomic"
	if _, err := validAtomic(plainAtomic, dt, aop); err != nil {
		return err
	}
	if _, err := operand(name, "buf", buf); err != nil {
		return err
	}
	o := atomicWriteOp
	o.ctx, o.comp = context, true
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: addr, RKey: uint32(key), SendFlags: verbs.SendFence}
	return e.post(name, wr, buf, desc, fabric.AddrNotAvail, o, false)
}

// FetchAtomic is fi_fetch_atomic: OpAtomicRead (IBV_WR_RDMA_READ of 8
// bytes) or OpSum (IBV_WR_ATOMIC_FETCH_AND_ADD), the prior value landing
// in result.
func (e *ep) FetchAtomic(buf []byte, desc any, result []byte, resultDesc any, _ fabric.Addr, addr, key uint64, dt fabric.Datatype, aop fabric.AtomicOp, context any) error {
	const name = "fi_fetch_atomic"
	if _, err := validAtomic(fetchAtomic, dt, aop); err != nil {
		return err
	}
	if _, err := operand(name, "result", result); err != nil {
		return err
	}
	wr := verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: addr, RKey: uint32(key), SendFlags: verbs.SendFence}
	if aop == fabric.OpSum {
		add, err := operand(name, "buf", buf)
		if err != nil {
			return err
		}
		wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, add
	}
	o := atomicReadOp
	o.ctx, o.comp = context, true
	return e.post(name, wr, result, resultDesc, fabric.AddrNotAvail, o, false)
}

// CompareAtomic is fi_compare_atomic: OpCSwap
// (IBV_WR_ATOMIC_CMP_AND_SWP), the prior value landing in result.
func (e *ep) CompareAtomic(buf []byte, _ any, compare []byte, _ any, result []byte, resultDesc any, _ fabric.Addr, addr, key uint64, dt fabric.Datatype, aop fabric.AtomicOp, context any) error {
	const name = "fi_compare_atomic"
	if _, err := validAtomic(compareAtomic, dt, aop); err != nil {
		return err
	}
	swap, err := operand(name, "buf", buf)
	if err != nil {
		return err
	}
	cmp, err := operand(name, "compare", compare)
	if err != nil {
		return err
	}
	if _, err := operand(name, "result", result); err != nil {
		return err
	}
	o := atomicReadOp
	o.ctx, o.comp = context, true
	wr := verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, RemoteAddr: addr, RKey: uint32(key), CompareAdd: cmp, Swap: swap, SendFlags: verbs.SendFence}
	return e.post(name, wr, result, resultDesc, fabric.AddrNotAvail, o, false)
}
