package pingpong

import (
	"strings"
	"testing"
)

// FuzzPingpongArgs: any command line of any of the four tools is either
// refused with a one-line error or parsed into options Run takes: no
// panic, and every count, size and port within range.
func FuzzPingpongArgs(f *testing.F) {
	for _, s := range []string{
		"", "-h", "-p\x000", "-p\x000\x00host", "-s\x001", "-s\x000", "-s\x0015", "-s\x0016", "-s\x002147483648", "-s\x009223372036854775808",
		"-s\x00-1", "-s\x00x", "-q\x00255\x00-r\x00255", "-r\x001", "-n\x002147483647", "-m\x00256", "-g\x000\x00-l\x0015", "--size=16", "-ec",
		"a\x00b", "--mtu=4096", "--num-qp=1", "-i\x00255",
	} {
		for tr := range 4 {
			f.Add(uint8(tr), s)
		}
	}
	f.Fuzz(func(t *testing.T, tr uint8, line string) {
		tp := Transport(int(tr) % 4)
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		o, err := ParseArgs(tp, args)
		if err != nil {
			// One line, unless an argument itself holds a newline
			// (getopt quotes what it refuses as given).
			if strings.Contains(err.Error(), "\n") && !strings.Contains(line, "\n") {
				t.Fatalf("%q: a multi-line error %q", args, err)
			}
			return
		}
		switch {
		case o.Size < 1 || o.Size > 1<<30 || o.RxDepth < 1 || o.Iters < 1 || o.IBPort < 1 || o.SL > 15:
			t.Fatalf("%q: %+v", args, o)
		case o.Port < 0 || o.Port > 65535 || (o.Server != "" && o.Port == 0):
			t.Fatalf("%q: port %d", args, o.Port)
		case tp != UD && o.MTU.Bytes() == 0:
			t.Fatalf("%q: MTU %v", args, o.MTU)
		case tp == SRQ && (o.NumQP < 1 || o.NumQP > 255 || o.NumQP > o.RxDepth):
			t.Fatalf("%q: %d QPs, rx depth %d", args, o.NumQP, o.RxDepth)
		}
	})
}
