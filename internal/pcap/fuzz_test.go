package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func FuzzReader(f *testing.F) {
	for _, vf := range validFiles() {
		f.Add(vf.file)
	}
	g := newNGFile(binary.BigEndian)
	g.idb(LinkTypeLinuxSLL, 0, g.tsresol(0x80|20), g.tsoffset(-5))
	g.idb(LinkTypeNull, 16, g.tsresol(12))
	g.idb(LinkTypeLoop, 0)
	g.epb(0, 1<<40, make([]byte, 20), 20)
	g.epb(1, 1<<62, []byte("\x02\x00\x00\x00\x45"), 5)
	g.spb(40, make([]byte, 16))
	g.epb(2, 0, []byte("\x00\x00\x00\x18\x60"), 5)
	f.Add(g.buf)
	p := newPcapFile(binary.BigEndian, true, 100, uint32(LinkTypeRaw)|0x14000000)
	p.record(1, 1, []byte("\x60"), 1)
	f.Add(p.buf)
	paths, _ := filepath.Glob(filepath.Join(capturesDir, "*.pcapng"))
	for _, path := range paths {
		if b, err := os.ReadFile(path); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		r, err := NewReader(bytes.NewReader(file))
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("NewReader error %v (%T) is not an *Error", err, err)
			}
			return
		}
		last := int64(-1)
		for i := 1; ; i++ {
			p, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				var pe *Error
				if !errors.As(err, &pe) {
					t.Fatalf("Next error %v (%T) is not an *Error", err, err)
				}
				if pe.Offset < 0 || pe.Offset > int64(len(file)) {
					t.Fatalf("error offset %d outside a %d-byte file", pe.Offset, len(file))
				}
				return
			}
			if len(p.Data) > MaxPacketLen {
				t.Fatalf("packet %d has %d bytes, more than MaxPacketLen", i, len(p.Data))
			}
			if p.Index != i {
				t.Fatalf("packet %d has Index %d", i, p.Index)
			}
			if p.Offset <= last || p.Offset+int64(len(p.Data)) > int64(len(file)) {
				t.Fatalf("packet %d at offset %d (%d bytes) after %d in a %d-byte file", i, p.Offset, len(p.Data), last, len(file))
			}
			last = p.Offset
			if !bytes.Contains(file[p.Offset:], p.Data) {
				t.Fatalf("packet %d data is not in the file after its offset", i)
			}
			proto, payload, err := Decode(p.LinkType, p.Data)
			if err == nil && len(payload) > len(p.Data) {
				t.Fatalf("Decode returned %d bytes of payload (proto %#04x) from a %d-byte frame", len(payload), proto, len(p.Data))
			}
		}
	})
}
