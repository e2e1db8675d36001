package rping

import (
	"context"
	"errors"
	"strconv"

	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/verbs"
)

// ExitStatus returns the exit status rping has after err: 0 for nil, the
// status of a *tool.ExitError, 130 (as after SIGINT) when the run was
// interrupted, and otherwise the value rping's failing function returned,
// -1 or an errno, as a process exit status.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	var e *tool.ExitError
	if errors.As(err, &e) {
		return e.Status
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return 130
	}
	return retval(err) & 0xff
}

// einval is EINVAL, rping's status for bad flags.
const einval = 22

var (
	// errFatal ends a run whose CM event handler failed: rping's CM
	// thread calls exit(-1) then.
	errFatal = &tool.ExitError{Status: 255, Msg: "rping: connection manager event failed"}
	// errFailed is a step that returned -1 after printing why.
	errFailed = &tool.ExitError{Status: 255, Msg: "rping: failed"}
)

// cmError is the failure of an rdma_* call, which returns -1 and sets
// errno.
type cmError struct{ err error }

func (e *cmError) Error() string { return e.err.Error() }
func (e *cmError) Unwrap() error { return e.err }

func cmFailed(err error) error { return &cmError{err} }

// retval returns what the rping function that failed with err returns:
// -1 for rdma_* calls and its own checks, errno for verbs calls.
func retval(err error) int {
	var ce *cmError
	if errors.As(err, &ce) {
		return -1
	}
	var ee *tool.ExitError
	if errors.As(err, &ee) {
		return -1
	}
	var en verbs.Errno
	if errors.As(err, &en) {
		return int(en)
	}
	return -1
}

// strerror returns glibc's text for the errno in err, as perror prints it.
func strerror(err error) string {
	var en verbs.Errno
	if !errors.As(err, &en) {
		return err.Error()
	}
	if s, ok := glibcErrno[int(en)]; ok {
		return s
	}
	return "Unknown error " + strconv.Itoa(int(en))
}

var glibcErrno = map[int]string{
	1:   "Operation not permitted",
	2:   "No such file or directory",
	5:   "Input/output error",
	9:   "Bad file descriptor",
	11:  "Resource temporarily unavailable",
	12:  "Cannot allocate memory",
	13:  "Permission denied",
	16:  "Device or resource busy",
	17:  "File exists",
	19:  "No such device",
	22:  "Invalid argument",
	61:  "No data available",
	95:  "Operation not supported",
	98:  "Address already in use",
	99:  "Cannot assign requested address",
	101: "Network is unreachable",
	104: "Connection reset by peer",
	110: "Connection timed out",
	111: "Connection refused",
	113: "No route to host",
}
