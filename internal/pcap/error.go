package pcap

import "strconv"

// Error reports a malformed, truncated or unreadable capture file: where the
// problem is and what it is. Offset is the byte offset in the file of the
// start of the header, record or block that is at fault.
type Error struct {
	// Offset is the byte offset of the faulty header, record or block.
	Offset int64
	// Msg describes the problem, for example "truncated enhanced packet
	// block".
	Msg string
	// Err is the underlying I/O error, if the problem was a failure of the
	// io.Reader rather than of the file's contents; otherwise nil.
	Err error
}

// Error returns a message of the form "offset 1234: truncated enhanced
// packet block", followed by ": " and the underlying error if there is one.
func (e *Error) Error() string {
	s := "offset " + strconv.FormatInt(e.Offset, 10) + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying I/O error, if any.
func (e *Error) Unwrap() error { return e.Err }
