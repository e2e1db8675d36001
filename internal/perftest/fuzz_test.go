package perftest

import "testing"

// FuzzParseDest: any key message either fails to parse or survives a
// round trip unchanged.
func FuzzParseDest(f *testing.F) {
	d := dest{outReads: 16, qpn: 0x11, psn: 0xabcdef, rkey: 0x1234, vaddr: 0x7f0000001000}
	f.Add(d.marshal())
	f.Add(make([]byte, keyLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseDest(b)
		if err != nil {
			return
		}
		again, err := parseDest(d.marshal())
		if err != nil || again != d {
			t.Fatalf("%q parsed as %+v, which marshals to something parsing as %+v, %v", b, d, again, err)
		}
	})
}

// FuzzParseRawDest: any rdma_cm key message either fails to parse or
// survives a round trip unchanged, as far as perftest reads it (lid
// through the GID).
func FuzzParseRawDest(f *testing.F) {
	d := dest{outReads: 16, qpn: 0x11, psn: 0xabcdef, rkey: 0x1234, vaddr: 0x7f0000001000, srqn: 3, gidIndex: 1}
	f.Add(d.marshalRaw())
	f.Add(make([]byte, rawKeyLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseRawDest(b)
		if err != nil {
			return
		}
		again, err := parseRawDest(d.marshalRaw())
		if err != nil || again != d {
			t.Fatalf("%x parsed as %+v, which marshals to something parsing as %+v, %v", b, d, again, err)
		}
	})
}
