package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// got is a packet copied out of a Reader, in a comparable form.
type got struct {
	Time      string // RFC 3339 with nanoseconds, UTC
	LinkType  LinkType
	Data      string
	OrigLen   int
	Offset    int64
	Index     int
	Interface int
}

// copyPacket converts p to a got.
func copyPacket(p Packet) got {
	return got{
		Time:      p.Time.Format(time.RFC3339Nano),
		LinkType:  p.LinkType,
		Data:      string(p.Data),
		OrigLen:   p.OrigLen,
		Offset:    p.Offset,
		Index:     p.Index,
		Interface: p.Interface,
	}
}

// ts formats a Unix time the way got.Time does.
func ts(sec, nsec int64) string {
	return time.Unix(sec, nsec).UTC().Format(time.RFC3339Nano)
}

// readAll reads every packet of file and returns them with the error that
// ended the reading. NewReader must succeed.
func readAll(t testing.TB, file []byte) ([]got, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	var ps []got
	for {
		p, err := r.Next()
		if err != nil {
			return ps, err
		}
		ps = append(ps, copyPacket(p))
	}
}

// wantPackets reads file and checks that it holds exactly want and ends with
// io.EOF.
func wantPackets(t *testing.T, file []byte, want []got) {
	t.Helper()
	ps, err := readAll(t, file)
	if err != io.EOF {
		t.Fatalf("reading ended with %v, want io.EOF", err)
	}
	if len(ps) != len(want) {
		t.Fatalf("got %d packets, want %d:\n got %+v\nwant %+v", len(ps), len(want), ps, want)
	}
	for i := range ps {
		if ps[i] != want[i] {
			t.Errorf("packet %d:\n got %+v\nwant %+v", i+1, ps[i], want[i])
		}
	}
}

// wantError reads file and checks that reading ends with an *Error at
// offset whose message contains msg.
func wantError(t *testing.T, file []byte, offset int64, msg string) {
	t.Helper()
	_, err := readAll(t, file)
	checkError(t, err, offset, msg)
}

// checkError checks that err is an *Error at offset containing msg.
func checkError(t *testing.T, err error, offset int64, msg string) {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("got error %v (%T), want *Error", err, err)
	}
	if pe.Offset != offset || !strings.Contains(pe.Msg, msg) {
		t.Fatalf("got error %q, want offset %d and message containing %q", err, offset, msg)
	}
}

func TestErrorMessage(t *testing.T) {
	e := &Error{Offset: 1234, Msg: "truncated enhanced packet block"}
	if got, want := e.Error(), "offset 1234: truncated enhanced packet block"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	boom := errors.New("boom")
	e = &Error{Offset: 8, Msg: "reading block header", Err: boom}
	if got, want := e.Error(), "offset 8: reading block header: boom"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, boom) {
		t.Errorf("errors.Is(%v, boom) = false", e)
	}
}

func TestNewReaderRejectsBadHeaders(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	goodPcap := newPcapFile(le, false, 0, 1).buf
	oldPcap := bytes.Clone(goodPcap)
	le.PutUint16(oldPcap[4:], 1)
	goodNG := newNGFile(le).buf
	badOrder := bytes.Clone(goodNG)
	copy(badOrder[8:], "\x01\x02\x03\x04")
	ngV2 := bytes.Clone(goodNG)
	le.PutUint16(ngV2[12:], 2)
	shortSHB := new(ngFile)
	shortSHB.order = le
	shortSHB.rawBlock(blockSHB, 24, 24, append(le.AppendUint32(nil, byteOrderMagic), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)[:12])
	mismatch := bytes.Clone(goodNG)
	be.PutUint32(mismatch[len(mismatch)-4:], 28)
	tests := []struct {
		name string
		file []byte
		msg  string
	}{
		{"empty file", nil, "empty file"},
		{"shorter than a magic number", []byte{0xd4, 0xc3, 0xb2}, "truncated file header"},
		{"unknown magic", []byte("GIF89a......................"), "unknown file magic 0x47494638"},
		{"gzip-compressed capture", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}, "unknown file magic"},
		{"truncated pcap file header", goodPcap[:20], "truncated pcap file header"},
		{"pcap version 1", oldPcap, "unsupported pcap version 1.4"},
		{"truncated section header block", goodNG[:20], "truncated section header block"},
		{"section header without byte-order magic", goodNG[:6], "truncated section header block"},
		{"bad byte-order magic", badOrder, "bad byte-order magic 0x01020304"},
		{"pcapng version 2", ngV2, "unsupported pcapng version 2.0"},
		{"section header block too short", shortSHB.buf, "length 24 less than minimum 28"},
		{"section header trailing length mismatch", mismatch, "trailing length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tt.file))
			if r != nil {
				t.Errorf("NewReader returned a Reader with error %v", err)
			}
			checkError(t, err, 0, tt.msg)
		})
	}
}

func TestNewReaderReportsIOErrors(t *testing.T) {
	boom := errors.New("boom")
	_, err := NewReader(iotest.ErrReader(boom))
	if !errors.Is(err, boom) {
		t.Fatalf("NewReader error %v does not wrap the reader's error", err)
	}
	checkError(t, err, 0, "reading file header")

	// An I/O error in the middle of the file is an *Error at the record
	// being read, wrapping the cause.
	file := newPcapFile(binary.LittleEndian, false, 0, 1).record(1, 2, []byte("abcd"), 4).buf
	r, err := NewReader(io.MultiReader(bytes.NewReader(file[:30]), iotest.ErrReader(boom)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Next()
	if !errors.Is(err, boom) {
		t.Fatalf("Next error %v does not wrap the reader's error", err)
	}
	checkError(t, err, 24, "reading pcap record header")
}

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		file []byte
		want string
	}{
		{newPcapFile(binary.BigEndian, true, 0, 1).buf, "pcap"},
		{newNGFile(binary.BigEndian).buf, "pcapng"},
	} {
		r, err := NewReader(bytes.NewReader(tt.file))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Format(); got != tt.want {
			t.Errorf("Format() = %q, want %q", got, tt.want)
		}
	}
}

func TestNextErrorsAreSticky(t *testing.T) {
	good := newPcapFile(binary.LittleEndian, false, 0, 1).record(1, 0, []byte("x"), 1).buf
	for _, tt := range []struct {
		name string
		file []byte
	}{
		{"clean end", good},
		{"truncated record", good[:len(good)-1]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var first error
			for first == nil {
				_, first = r.Next()
			}
			for range 3 {
				if _, err := r.Next(); err != first {
					t.Fatalf("Next after %v returned %v", first, err)
				}
			}
		})
	}
}

// validFiles returns small well-formed files covering every record and
// block type, with the offsets at which each may end cleanly and the number
// of packets before each of those offsets.
func validFiles() []struct {
	name    string
	file    []byte
	ends    []int
	packets []int
} {
	type vf = struct {
		name    string
		file    []byte
		ends    []int
		packets []int
	}
	var out []vf
	for _, order := range []byteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, nano := range []bool{false, true} {
			f := newPcapFile(order, nano, 0, 1)
			f.record(1, 2, ethFrame(0x0800, []byte("\x45ipv4")), 100)
			f.record(3, 4, nil, 0)
			f.record(5, 6, []byte("abc"), 3)
			name := "pcap " + order.String() + " microseconds"
			if nano {
				name = "pcap " + order.String() + " nanoseconds"
			}
			out = append(out, vf{name, f.buf, f.ends, []int{0, 1, 2, 3}})
		}
		g := newNGFile(order)
		g.idb(LinkTypeEthernet, 0, g.opt(2, []byte("eth0")), g.endOpt())
		g.epb(0, 1e6, ethFrame(0x0800, []byte("\x45abc")), 18, g.opt(1, []byte("comment")))
		g.block(blockISB, make([]byte, 12))
		g.idb(LinkTypeRaw, 64, g.tsresol(9), g.tsoffset(7))
		g.spb(5, []byte("\x60abcd"))
		g.pb(1, 42, []byte("\x45zzzz"), 5)
		g.shb(order)
		g.idb(LinkTypeLinuxSLL2, 0)
		g.epb(0, 3, make([]byte, 21), 21)
		g.block(0x12345678, nil)
		packets := g.packets
		out = append(out, vf{"pcapng " + order.String(), g.buf, g.ends, packets})
	}
	return out
}

// TestTruncatedFiles checks that every strict prefix of a valid file either
// ends with io.EOF exactly at a record or block boundary, having returned
// the packets before it, or fails with an *Error.
func TestTruncatedFiles(t *testing.T) {
	for _, vf := range validFiles() {
		t.Run(vf.name, func(t *testing.T) {
			packetsAt := make(map[int]int)
			for i, end := range vf.ends {
				packetsAt[end] = vf.packets[i]
			}
			if _, err := readAll(t, vf.file); err != io.EOF {
				t.Fatalf("full file: %v", err)
			}
			for n := range len(vf.file) {
				prefix := vf.file[:n]
				r, err := NewReader(bytes.NewReader(prefix))
				if err != nil {
					var pe *Error
					if !errors.As(err, &pe) {
						t.Fatalf("prefix %d: NewReader error %v is not an *Error", n, err)
					}
					if n >= vf.ends[0] {
						t.Fatalf("prefix %d: NewReader failed after the file header: %v", n, err)
					}
					continue
				}
				count := 0
				for {
					_, err = r.Next()
					if err != nil {
						break
					}
					count++
				}
				want, boundary := packetsAt[n]
				switch {
				case err == io.EOF && !boundary:
					t.Fatalf("prefix %d: io.EOF in the middle of a record", n)
				case err == io.EOF && count != want:
					t.Fatalf("prefix %d: got %d packets before io.EOF, want %d", n, count, want)
				case err != io.EOF && boundary:
					t.Fatalf("prefix %d: error %v at a record boundary", n, err)
				case err != io.EOF:
					var pe *Error
					if !errors.As(err, &pe) {
						t.Fatalf("prefix %d: error %v is not an *Error", n, err)
					}
					if !strings.HasPrefix(pe.Msg, "truncated ") || pe.Offset >= int64(n) {
						t.Fatalf("prefix %d: error %q, want truncation before the end", n, err)
					}
				}
			}
		})
	}
}

func TestNextReusesBuffer(t *testing.T) {
	f := newPcapFile(binary.LittleEndian, false, 0, 1)
	f.record(0, 0, bytes.Repeat([]byte{1}, 100), 100)
	f.record(0, 0, bytes.Repeat([]byte{2}, 50), 50)
	r, err := NewReader(bytes.NewReader(f.buf))
	if err != nil {
		t.Fatal(err)
	}
	p1, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	first := &p1.Data[0]
	p2, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if &p2.Data[0] != first {
		t.Error("second packet does not reuse the first packet's buffer")
	}
	if p2.Data[0] != 2 || len(p2.Data) != 50 {
		t.Errorf("second packet = %d bytes starting %d, want 50 starting 2", len(p2.Data), p2.Data[0])
	}
}

// manyPackets returns a pcap and a pcapng file of n packets of varying
// size, the first of which is the largest.
func manyPackets(n int) (pcapFileBytes, ngFileBytes []byte) {
	f := newPcapFile(binary.LittleEndian, true, 65535, 1)
	g := newNGFile(binary.BigEndian)
	g.idb(LinkTypeEthernet, 0, g.tsresol(9))
	data := make([]byte, 1500)
	for i := range n {
		size := 1500 - i%1400
		f.record(uint32(i), uint32(i), data[:size], uint32(size))
		g.epb(0, uint64(i), data[:size], uint32(size))
		if i%100 == 0 {
			g.block(blockISB, make([]byte, 12))
		}
	}
	return f.buf, g.buf
}

func TestNextDoesNotAllocate(t *testing.T) {
	const runs = 2000
	pcapBytes, ngBytes := manyPackets(runs + 10)
	for _, tt := range []struct {
		name string
		file []byte
	}{
		{"pcap", pcapBytes},
		{"pcapng", ngBytes},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tt.file))
			if err != nil {
				t.Fatal(err)
			}
			// AllocsPerRun's warm-up call reads the largest packet.
			var nextErr error
			allocs := testing.AllocsPerRun(runs, func() {
				if _, err := r.Next(); err != nil {
					nextErr = err
				}
			})
			if nextErr != nil {
				t.Fatal(nextErr)
			}
			if allocs != 0 {
				t.Errorf("Next allocates %v times per packet, want 0", allocs)
			}
		})
	}
}

func BenchmarkNext(b *testing.B) {
	pcapBytes, ngBytes := manyPackets(1000)
	for _, bb := range []struct {
		name string
		file []byte
	}{
		{"pcap", pcapBytes},
		{"pcapng", ngBytes},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(bb.file)))
			b.ReportAllocs()
			for b.Loop() {
				r, err := NewReader(bytes.NewReader(bb.file))
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := r.Next(); err != nil {
						if err != io.EOF {
							b.Fatal(err)
						}
						break
					}
				}
			}
		})
	}
}
