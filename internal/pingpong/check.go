package pingpong

import (
	"fmt"
	"os"
)

// pageSize is the unit of the -c marks.
var pageSize = os.Getpagesize()

// markPages writes the -c pattern of the C programs: the first byte of
// every page holds the page number modulo sizeof(char), which is to say 0.
func markPages(b []byte) {
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
}

// checkData verifies a received message of rc, uc or ud against the -c
// pattern: 0x7b with a 0 at the start of every page.
func checkData(b []byte, size int) error { return checkFilled(b, size, fill) }

// checkFilled verifies a received message against the -c pattern over a
// buffer filled with f.
func checkFilled(b []byte, size int, f byte) error {
	if len(b) != size {
		return fmt.Errorf("received %d bytes, expected %d", len(b), size)
	}
	for i, v := range b {
		want := f
		if i%pageSize == 0 {
			want = 0
		}
		if v != want {
			return fmt.Errorf("invalid data in page %d: byte %d is 0x%02x, expected 0x%02x", i/pageSize, i, v, want)
		}
	}
	return nil
}
