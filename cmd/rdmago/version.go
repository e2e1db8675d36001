package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// runVersion is `rdmago version`: the module version and the VCS revision
// the binary was built from, as the build recorded them.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] != "-h" && args[0] != "--help" {
		fmt.Fprintf(stderr, "rdmago version: takes no arguments, got %q\n", args[0])
		return 2
	}
	if len(args) > 0 {
		fmt.Fprintln(stdout, "usage: rdmago version\n\nprints the module version, the VCS revision and the Go version the binary was built with")
		return 0
	}
	fmt.Fprintln(stdout, versionString())
	return 0
}

// versionString is "rdmago <module version> (<revision>[, modified], <time>) <go version> <os>/<arch>".
func versionString() string {
	version, rev, when, modified := "(devel)", "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	s := "rdmago " + version
	if rev != "" {
		s += " (" + rev
		if modified {
			s += ", modified"
		}
		if when != "" {
			s += ", " + when
		}
		s += ")"
	}
	return s + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
