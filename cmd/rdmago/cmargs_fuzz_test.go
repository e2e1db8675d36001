package main

import (
	"io"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/internal/mckey"
	"github.com/rdmago/rdmago/internal/rping"
	"github.com/rdmago/rdmago/internal/rstream"
	"github.com/rdmago/rdmago/internal/udaddy"
)

// FuzzCMToolArgs: any command line of rping, rstream, udaddy or mckey is
// refused or parsed into options whose sizes and counts a run can use:
// no panic, nothing negative, nothing too large to allocate.
func FuzzCMToolArgs(f *testing.F) {
	for _, s := range []string{
		"", "-h", "-s", "-c\x00-a\x00127.0.0.1", "-S\x001", "-S\x0015", "-S\x0016", "-S\x002147483648", "-S\x009223372036854775807",
		"-S\x00all", "-S\x00-1", "-C\x00x", "-B\x000", "-i\x001000", "-k\x001", "-T\x00sv", "-p\x000", "-p\x0070000", "-m\x00239.1.1.1",
		"-b\x00::1", "-t\x00256", "-c\x000", "-I\x00127.0.0.2", "-Sall", "--", "-", "-Z",
	} {
		for tool := range 4 {
			f.Add(uint8(tool), s)
		}
	}
	f.Fuzz(func(t *testing.T, tool uint8, line string) {
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		switch tool % 4 {
		case 0:
			o, err := rping.ParseArgs(args, io.Discard, io.Discard)
			if err == nil && (o.Count < 0 || o.Size < rping.MinSize || o.Size > rping.MaxSize) {
				t.Fatalf("rping %q: %+v", args, o)
			}
		case 1:
			o, err := rstream.ParseArgs(args, io.Discard, io.Discard)
			if err == nil && (o.Size < 0 || o.Size > rstream.MaxTransfer || o.Buffer < 0 || o.Buffer > rstream.MaxBuffer ||
				o.Inline < 0 || o.Inline > rstream.MaxInline || o.Count < 0 || o.Iterations < 0 || o.KeepAlive < 0) {
				t.Fatalf("rstream %q: %+v", args, o)
			}
		case 2:
			o, err := udaddy.ParseArgs(args, io.Discard, io.Discard)
			if err == nil && (o.Connections < 0 || o.Count < 0 || o.Size < 0 || o.Size > 1<<30) {
				t.Fatalf("udaddy %q: %+v", args, o)
			}
		case 3:
			o, err := mckey.ParseArgs(args, io.Discard, io.Discard)
			if err == nil && (o.Connections < 0 || o.Count < 0 || o.Size < 0 || o.Size > 1<<30) {
				t.Fatalf("mckey %q: %+v", args, o)
			}
		}
	})
}
