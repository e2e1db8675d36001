package riostream

import (
	"io"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/internal/tool"
)

// FuzzParseArgs: any command line is refused or parsed into options a
// run can use: no panic, a transfer of 1 byte or more that can be
// allocated, at least one transfer a round, nothing negative.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"", "-h", "-s", "-S\x001", "-S\x000", "-S\x0015", "-S\x002147483648", "-S\x00all", "-S\x00-1", "-C\x000", "-C\x00x",
		"-B\x000", "-i\x001000", "-T\x00v", "-T\x00sv", "-T\x00verify", "-p\x000", "-b\x00::1", "-I\x000", "-Sall", "--", "-", "-Z", "-f\x00gid",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		o, err := ParseArgs(args, io.Discard, io.Discard)
		if err != nil {
			if tool.Status(err) == 0 {
				t.Fatalf("%q: error %v exits 0", args, err)
			}
			return
		}
		if o.Size < 1 || o.Size > MaxTransfer || o.Buffer < 0 || o.Buffer > MaxBuffer || o.Inline < 0 || o.Inline > MaxInline ||
			o.Count < 1 || o.Iterations < 0 {
			t.Fatalf("%q: %+v", args, o)
		}
	})
}
