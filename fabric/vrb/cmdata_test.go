package vrb

import (
	"bytes"
	"testing"
)

// The private data a peer sends goes through withHdr; stripHdr gives it
// back, whatever padding the CM added after it.
func TestPrivateDataRoundTrip(t *testing.T) {
	for _, p := range [][]byte{nil, {0}, []byte("hello"), bytes.Repeat([]byte{7}, maxCMData)} {
		b, err := withHdr("fi_connect", p)
		if err != nil {
			t.Fatal(err)
		}
		padded := append(b, make([]byte, 56-len(b))...)
		if got := stripHdr(padded); !bytes.Equal(got, p) && len(p) > 0 {
			t.Errorf("%q came back as %q", p, got)
		}
	}
	if _, err := withHdr("fi_connect", make([]byte, maxCMData+1)); err == nil {
		t.Error("56 bytes of private data accepted")
	}
}

// FuzzStripHdr: whatever a peer sends, stripHdr returns at most what was
// there after the length byte, and never panics.
func FuzzStripHdr(f *testing.F) {
	f.Add([]byte{5, 'h', 'e', 'l', 'l', 'o', 0, 0})
	f.Add([]byte{255})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got := stripHdr(b)
		if len(b) > 0 && len(got) > len(b)-1 {
			t.Fatalf("%d bytes out of %d", len(got), len(b))
		}
		if len(got) > 0 && !bytes.Equal(got, b[1:1+len(got)]) {
			t.Fatalf("%q is not what followed the length in %q", got, b)
		}
	})
}
