package verbs

import "strconv"

// Errno is an errno-like error code. libibverbs returns these numbers (as
// positive return values or in errno); the values here are Linux's, so a
// C programmer's EINVAL is ErrInvalidArgument with the same number.
type Errno uint32

// Error codes verbs calls return, wrapped in an *Error that says which call
// failed and why. Test with errors.Is(err, verbs.ErrInvalidArgument).
const (
	ErrPermission      Errno = 1   // EPERM
	ErrNoEntry         Errno = 2   // ENOENT
	ErrIO              Errno = 5   // EIO
	ErrAgain           Errno = 11  // EAGAIN
	ErrNoMemory        Errno = 12  // ENOMEM: a queue or table is full
	ErrAccess          Errno = 13  // EACCES
	ErrBusy            Errno = 16  // EBUSY: the resource is still in use
	ErrExist           Errno = 17  // EEXIST
	ErrNoDevice        Errno = 19  // ENODEV
	ErrInvalidArgument Errno = 22  // EINVAL
	ErrNotSupported    Errno = 95  // EOPNOTSUPP
	ErrAddrInUse       Errno = 98  // EADDRINUSE
	ErrAddrNotAvail    Errno = 99  // EADDRNOTAVAIL: no local device serves the address
	ErrNetUnreach      Errno = 101 // ENETUNREACH
	ErrConnReset       Errno = 104 // ECONNRESET
	ErrConnRefused     Errno = 111 // ECONNREFUSED
	ErrHostUnreach     Errno = 113 // EHOSTUNREACH
	ErrTimedOut        Errno = 110 // ETIMEDOUT
	ErrClosed          Errno = 9   // EBADF: the object was closed or destroyed
)

var errnoStr = map[Errno]string{
	ErrPermission:      "operation not permitted",
	ErrNoEntry:         "no such entry",
	ErrIO:              "input/output error",
	ErrAgain:           "resource temporarily unavailable",
	ErrNoMemory:        "cannot allocate memory",
	ErrAccess:          "permission denied",
	ErrBusy:            "device or resource busy",
	ErrExist:           "already exists",
	ErrNoDevice:        "no such device",
	ErrInvalidArgument: "invalid argument",
	ErrNotSupported:    "operation not supported",
	ErrAddrInUse:       "address already in use",
	ErrAddrNotAvail:    "cannot assign requested address",
	ErrNetUnreach:      "network is unreachable",
	ErrConnReset:       "connection reset by peer",
	ErrConnRefused:     "connection refused",
	ErrHostUnreach:     "no route to host",
	ErrTimedOut:        "timed out",
	ErrClosed:          "object closed or destroyed",
}

// Error returns the errno's description ("invalid argument").
func (e Errno) Error() string {
	if s, ok := errnoStr[e]; ok {
		return s
	}
	return "errno " + strconv.Itoa(int(e))
}

// Error is the error a verbs call returns: which call (named after its C
// counterpart), the errno, and what was wrong.
type Error struct {
	Op     string // the C counterpart: "ibv_modify_qp"
	Errno  Errno
	Detail string // what was wrong, for a person: "INIT->RTR needs IBV_QP_PATH_MTU"
}

// Error formats the error as "ibv_modify_qp: invalid argument: INIT->RTR needs ...".
func (e *Error) Error() string {
	s := e.Op + ": " + e.Errno.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the errno, so errors.Is(err, verbs.ErrInvalidArgument) works.
func (e *Error) Unwrap() error { return e.Errno }

// Errorf builds an *Error. Providers use it to report failures in the same
// form as the verbs layer.
func Errorf(op string, errno Errno, detail string) error {
	return &Error{Op: op, Errno: errno, Detail: detail}
}

// WRError reports the work request a PostSend or PostRecv call stopped at
// (libibverbs' bad_wr): the requests before it were posted, it and those
// after it were not.
type WRError struct {
	Index int    // index of the failing request in the slice given
	WRID  uint64 // its WRID
	Err   error  // why it failed (an *Error)
}

// Error describes the failing request.
func (e *WRError) Error() string {
	return "work request " + strconv.Itoa(e.Index) + " (wr_id " + strconv.FormatUint(e.WRID, 10) + "): " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *WRError) Unwrap() error { return e.Err }
