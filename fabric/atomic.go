package fabric

import "fmt"

// Datatype is the type of an atomic operation's elements (enum
// fi_datatype), libfabric's numbering.
type Datatype int

// Atomic datatypes.
const (
	Int8              Datatype = iota // FI_INT8
	Uint8                             // FI_UINT8
	Int16                             // FI_INT16
	Uint16                            // FI_UINT16
	Int32                             // FI_INT32
	Uint32                            // FI_UINT32
	Int64                             // FI_INT64
	Uint64                            // FI_UINT64
	Float                             // FI_FLOAT
	Double                            // FI_DOUBLE
	FloatComplex                      // FI_FLOAT_COMPLEX
	DoubleComplex                     // FI_DOUBLE_COMPLEX
	LongDouble                        // FI_LONG_DOUBLE
	LongDoubleComplex                 // FI_LONG_DOUBLE_COMPLEX
)

var datatypeNames = [...]string{"FI_INT8", "FI_UINT8", "FI_INT16", "FI_UINT16", "FI_INT32", "FI_UINT32", "FI_INT64",
	"FI_UINT64", "FI_FLOAT", "FI_DOUBLE", "FI_FLOAT_COMPLEX", "FI_DOUBLE_COMPLEX", "FI_LONG_DOUBLE", "FI_LONG_DOUBLE_COMPLEX"}

var datatypeSizes = [...]int{1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 16, 32}

func (t Datatype) String() string {
	if t < 0 || int(t) >= len(datatypeNames) {
		return fmt.Sprintf("Datatype(%d)", int(t))
	}
	return datatypeNames[t]
}

// Size is the size of one element in bytes (ofi_datatype_size), 0 for
// a datatype libfabric does not have.
func (t Datatype) Size() int {
	if t < 0 || int(t) >= len(datatypeSizes) {
		return 0
	}
	return datatypeSizes[t]
}

// AtomicOp is an atomic operation (enum fi_op), libfabric's numbering.
type AtomicOp int

// Atomic operations. The target element becomes op(target, operand),
// except that AtomicRead leaves it and the compare operations swap in
// the operand only where the comparison holds.
const (
	OpMin         AtomicOp = iota // FI_MIN
	OpMax                         // FI_MAX
	OpSum                         // FI_SUM
	OpProd                        // FI_PROD
	OpLOr                         // FI_LOR
	OpLAnd                        // FI_LAND
	OpBOr                         // FI_BOR
	OpBAnd                        // FI_BAND
	OpLXor                        // FI_LXOR
	OpBXor                        // FI_BXOR
	OpAtomicRead                  // FI_ATOMIC_READ
	OpAtomicWrite                 // FI_ATOMIC_WRITE
	OpCSwap                       // FI_CSWAP: swap if equal to compare
	OpCSwapNE                     // FI_CSWAP_NE
	OpCSwapLE                     // FI_CSWAP_LE
	OpCSwapLT                     // FI_CSWAP_LT
	OpCSwapGE                     // FI_CSWAP_GE
	OpCSwapGT                     // FI_CSWAP_GT
	OpMSwap                       // FI_MSWAP: swap the bits compare masks
)

var opNames = [...]string{"FI_MIN", "FI_MAX", "FI_SUM", "FI_PROD", "FI_LOR", "FI_LAND", "FI_BOR", "FI_BAND", "FI_LXOR",
	"FI_BXOR", "FI_ATOMIC_READ", "FI_ATOMIC_WRITE", "FI_CSWAP", "FI_CSWAP_NE", "FI_CSWAP_LE", "FI_CSWAP_LT",
	"FI_CSWAP_GE", "FI_CSWAP_GT", "FI_MSWAP"}

func (op AtomicOp) String() string {
	if op < 0 || int(op) >= len(opNames) {
		return fmt.Sprintf("AtomicOp(%d)", int(op))
	}
	return opNames[op]
}

// CompAtomic marks the completion of an atomic operation (FI_ATOMIC),
// with CompWrite for Atomic and CompRead for FetchAtomic and
// CompareAtomic.
const CompAtomic = uint64(CapAtomic)

// Atomics are the atomic operations of an endpoint with FI_ATOMIC
// (fi_atomic.h). Operands are byte slices holding count elements of the
// datatype in host byte order; addr and key name the target in the
// peer's region as for RMA. The Valid methods say whether the provider
// offers an operation on a datatype, and how many elements it takes at
// once (fi_atomicvalid and its fetch and compare forms); the others fail
// with ErrNoSys for what they do not offer.
type Atomics interface {
	// Atomic applies op with the elements of buf to the target
	// (fi_atomic).
	Atomic(buf []byte, desc any, dest Addr, addr, key uint64, dt Datatype, op AtomicOp, context any) error
	// FetchAtomic is Atomic that also returns the target's prior
	// elements in result (fi_fetch_atomic); buf is unused for
	// OpAtomicRead.
	FetchAtomic(buf []byte, desc any, result []byte, resultDesc any, dest Addr, addr, key uint64, dt Datatype, op AtomicOp, context any) error
	// CompareAtomic swaps in buf's elements where the target compares
	// with compare's as op says, and returns the prior ones in result
	// (fi_compare_atomic).
	CompareAtomic(buf []byte, desc any, compare []byte, compareDesc any, result []byte, resultDesc any, dest Addr, addr, key uint64, dt Datatype, op AtomicOp, context any) error
	AtomicValid(dt Datatype, op AtomicOp) (count int, err error)
	FetchAtomicValid(dt Datatype, op AtomicOp) (count int, err error)
	CompareAtomicValid(dt Datatype, op AtomicOp) (count int, err error)
}

// NoAtomics is Atomics whose every call fails with ErrNoSys, as
// Endpoint answers for a driver without Atomics (libfabric's tcp
// provider, verbs;ofi_rxm); a provider embeds it to say so explicitly.
type NoAtomics struct{}

func errNoAtomic(name string) error {
	return Errorf(name, ErrNoSys, "the endpoint has no FI_ATOMIC")
}

func (NoAtomics) Atomic([]byte, any, Addr, uint64, uint64, Datatype, AtomicOp, any) error {
	return errNoAtomic("fi_atomic")
}

func (NoAtomics) FetchAtomic([]byte, any, []byte, any, Addr, uint64, uint64, Datatype, AtomicOp, any) error {
	return errNoAtomic("fi_fetch_atomic")
}

func (NoAtomics) CompareAtomic([]byte, any, []byte, any, []byte, any, Addr, uint64, uint64, Datatype, AtomicOp, any) error {
	return errNoAtomic("fi_compare_atomic")
}

func (NoAtomics) AtomicValid(Datatype, AtomicOp) (int, error) {
	return 0, errNoAtomic("fi_atomicvalid")
}

func (NoAtomics) FetchAtomicValid(Datatype, AtomicOp) (int, error) {
	return 0, errNoAtomic("fi_fetch_atomicvalid")
}

func (NoAtomics) CompareAtomicValid(Datatype, AtomicOp) (int, error) {
	return 0, errNoAtomic("fi_compare_atomicvalid")
}
