package fabric

import (
	"strconv"
	"syscall"
)

// Errno is a libfabric error number (fi_errno.h): the errno values below
// 256, libfabric's own from 256. Calls return it positive, as Go errors;
// libfabric returns -Errno. Test with errors.Is(err, fabric.ErrAgain).
type Errno int

// Error numbers, with libfabric's values.
const (
	ErrNoEntry      Errno = 2   // FI_ENOENT
	ErrIO           Errno = 5   // FI_EIO
	ErrTooBig       Errno = 7   // FI_E2BIG
	ErrBadFD        Errno = 9   // FI_EBADF
	ErrAgain        Errno = 11  // FI_EAGAIN: try again after progress
	ErrNoMemory     Errno = 12  // FI_ENOMEM
	ErrAccess       Errno = 13  // FI_EACCES
	ErrBusy         Errno = 16  // FI_EBUSY
	ErrNoDevice     Errno = 19  // FI_ENODEV
	ErrInvalid      Errno = 22  // FI_EINVAL
	ErrTooManyFiles Errno = 24  // FI_EMFILE
	ErrNoSpace      Errno = 28  // FI_ENOSPC
	ErrNoSys        Errno = 38  // FI_ENOSYS
	ErrNoData       Errno = 61  // FI_ENODATA: no match (fi_getinfo), no entry
	ErrOverflow     Errno = 75  // FI_EOVERFLOW
	ErrMsgSize      Errno = 90  // FI_EMSGSIZE
	ErrNoProtoOpt   Errno = 92  // FI_ENOPROTOOPT
	ErrNotSupported Errno = 95  // FI_EOPNOTSUPP
	ErrAddrInUse    Errno = 98  // FI_EADDRINUSE
	ErrAddrNotAvail Errno = 99  // FI_EADDRNOTAVAIL
	ErrNetDown      Errno = 100 // FI_ENETDOWN
	ErrNetUnreach   Errno = 101 // FI_ENETUNREACH
	ErrConnAborted  Errno = 103 // FI_ECONNABORTED
	ErrConnReset    Errno = 104 // FI_ECONNRESET
	ErrIsConn       Errno = 106 // FI_EISCONN
	ErrNotConn      Errno = 107 // FI_ENOTCONN
	ErrShutdown     Errno = 108 // FI_ESHUTDOWN
	ErrTimedOut     Errno = 110 // FI_ETIMEDOUT
	ErrConnRefused  Errno = 111 // FI_ECONNREFUSED
	ErrHostUnreach  Errno = 113 // FI_EHOSTUNREACH
	ErrAlready      Errno = 114 // FI_EALREADY
	ErrInProgress   Errno = 115 // FI_EINPROGRESS
	ErrCanceled     Errno = 125 // FI_ECANCELED
	ErrKeyRejected  Errno = 129 // FI_EKEYREJECTED

	ErrOther      Errno = 256 // FI_EOTHER
	ErrTooSmall   Errno = 257 // FI_ETOOSMALL
	ErrOpBadState Errno = 258 // FI_EOPBADSTATE
	ErrAvail      Errno = 259 // FI_EAVAIL: an error entry is waiting (fi_cq_readerr, fi_eq_readerr)
	ErrBadFlags   Errno = 260 // FI_EBADFLAGS
	ErrNoEQ       Errno = 261 // FI_ENOEQ
	ErrDomain     Errno = 262 // FI_EDOMAIN
	ErrNoCQ       Errno = 263 // FI_ENOCQ
	ErrCRC        Errno = 264 // FI_ECRC
	ErrTrunc      Errno = 265 // FI_ETRUNC: the message was longer than the buffer
	ErrNoKey      Errno = 266 // FI_ENOKEY
	ErrNoAV       Errno = 267 // FI_ENOAV
	ErrOverrun    Errno = 268 // FI_EOVERRUN
	ErrNoRx       Errno = 269 // FI_ENORX
)

// libfabric's own messages (fi_strerror for 256 and up).
var errstr = [...]string{
	"Unspecified error",
	"Provided buffer is too small",
	"Operation not permitted in current state",
	"Error available",
	"Flags not supported",
	"Missing or unavailable event queue",
	"Invalid resource domain",
	"Missing or unavailable completion queue",
	"CRC error",
	"Truncation error",
	"Required key not available",
	"Missing or unavailable address vector",
	"Queue has been overrun",
	"Receiver not ready, no receive buffers available",
}

// Error returns fi_strerror's text: strerror's for system errors
// ("Resource temporarily unavailable"), libfabric's own above 255
// ("Truncation error").
func (e Errno) Error() string {
	if e >= ErrOther && int(e-ErrOther) < len(errstr) {
		return errstr[e-ErrOther]
	}
	if e > 0 && e < ErrOther {
		s := syscall.Errno(e).Error()
		if s != "" {
			// Go's texts are C's, lower-cased: restore the capital.
			return string(s[0]-'a'+'A') + s[1:]
		}
	}
	return "Unknown error " + strconv.Itoa(int(e))
}

// StrError is fi_strerror: the text of errno n (positive or negative).
func StrError(n int) string {
	if n < 0 {
		n = -n
	}
	return Errno(n).Error()
}

// Is makes errors.Is(err, fabric.ErrAgain) and errors.Is(err, syscall.EAGAIN)
// both work.
func (e Errno) Is(target error) bool {
	if t, ok := target.(syscall.Errno); ok {
		return int(t) == int(e)
	}
	return false
}

// Error is the error a fabric call returns: which call (named after its C
// counterpart), the errno, and what was wrong.
type Error struct {
	Op     string // "fi_connect"
	Errno  Errno
	Detail string
}

func (e *Error) Error() string {
	s := e.Op + ": " + e.Errno.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// Errorf builds an *Error; providers use it too.
func Errorf(op string, errno Errno, detail string) error {
	return &Error{Op: op, Errno: errno, Detail: detail}
}
