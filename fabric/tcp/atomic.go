package tcp

import "github.com/rdmago/rdmago/fabric"

// noAtomics gives the tcp provider's endpoints fabric.Atomics: like
// libfabric's tcp provider, they offer no FI_ATOMIC.
type noAtomics struct{}

func errNoAtomic(name string) error {
	return fabric.Errorf(name, fabric.ErrNoSys, "the tcp provider has no FI_ATOMIC")
}

func (noAtomics) Atomic([]byte, any, fabric.Addr, uint64, uint64, fabric.Datatype, fabric.AtomicOp, any) error {
	return errNoAtomic("fi_atomic")
}

func (noAtomics) FetchAtomic([]byte, any, []byte, any, fabric.Addr, uint64, uint64, fabric.Datatype, fabric.AtomicOp, any) error {
	return errNoAtomic("fi_fetch_atomic")
}

func (noAtomics) CompareAtomic([]byte, any, []byte, any, []byte, any, fabric.Addr, uint64, uint64, fabric.Datatype, fabric.AtomicOp, any) error {
	return errNoAtomic("fi_compare_atomic")
}

func (noAtomics) AtomicValid(fabric.Datatype, fabric.AtomicOp) (int, error) {
	return 0, errNoAtomic("fi_atomicvalid")
}

func (noAtomics) FetchAtomicValid(fabric.Datatype, fabric.AtomicOp) (int, error) {
	return 0, errNoAtomic("fi_fetch_atomicvalid")
}

func (noAtomics) CompareAtomicValid(fabric.Datatype, fabric.AtomicOp) (int, error) {
	return 0, errNoAtomic("fi_compare_atomicvalid")
}
