package perftest

import (
	"strings"
	"testing"
)

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

// FuzzParseArgs: any command line, for any tool, is either refused with
// an error or parsed into options a run can use: no panic, and every
// count and size within what the run's loops and buffers take.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"", "-a", "-s\x001", "-s\x000", "-s\x0015", "-s\x0016", "-s\x002147483648", "-s\x009223372036854775808", "-s\x00-1", "-s\x00x",
		"-q\x0016\x00-a", "-n\x005\x00-l\x005", "-c\x00UD\x00-I\x00900", "-D\x002\x00-f\x000", "--run_infinitely", "-t\x001\x00-Q\x001024",
		"-r\x001\x00-n\x005", "-m\x00256", "-x\x000\x00-i\x001", "-R\x00-q\x002", "--plot\x00x.svg\x00-a", "-b\x00-l\x002", "host\x00-p\x000",
		"-A\x00CMP_AND_SWAP", "-o\x001\x00-u\x0031", "-U\x00-D\x001", "--out=json", "-s16", "-q2", "--size=1", "-abeNF",
	} {
		for tool := range Tools {
			f.Add(uint8(tool), s)
		}
	}
	f.Fuzz(func(t *testing.T, tool uint8, line string) {
		tl := Tools[int(tool)%len(Tools)]
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		o, err := ParseArgs(tl, args)
		if err != nil {
			return
		}
		switch {
		case o.Size < 1 || o.Size > MaxSize:
			t.Fatalf("%q: size %d", args, o.Size)
		case o.Iters < 5 || o.TxDepth < 1 || o.RxDepth < 1 || o.CQMod < 1 || o.PostList < 1:
			t.Fatalf("%q: iters %d, tx depth %d, rx depth %d, CQ moderation %d, post list %d", args, o.Iters, o.TxDepth, o.RxDepth, o.CQMod, o.PostList)
		case o.NumQPs < 1 || (tl.Lat && o.NumQPs != 1):
			t.Fatalf("%q: %d QPs", args, o.NumQPs)
		case o.PostList > o.TxDepth:
			t.Fatalf("%q: post list %d over tx depth %d", args, o.PostList, o.TxDepth)
		case o.Duration < 0 || o.Margin < 0 || (o.Duration > 0 && o.Duration <= 2*o.Margin && !o.Infinitely):
			t.Fatalf("%q: -D %d -f %d", args, o.Duration, o.Margin)
		case o.Port < 1 || o.Port > 65535 || o.IBPort < 1:
			t.Fatalf("%q: port %d, IB port %d", args, o.Port, o.IBPort)
		case o.bufferSize() > maxBuffer:
			t.Fatalf("%q: a %d-byte buffer", args, o.bufferSize())
		case len(o.sizes()) == 0 && o.Conn != UD:
			t.Fatalf("%q: no sizes", args)
		}
	})
}
