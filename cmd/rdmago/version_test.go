package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionNamesTheModuleAndGo(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errs bytes.Buffer
		if st := run(args, &out, &errs); st != 0 {
			t.Fatalf("%v: status %d: %s", args, st, errs.String())
		}
		if !strings.HasPrefix(out.String(), "rdmago ") || !strings.Contains(out.String(), " go1.") {
			t.Errorf("%v printed %q", args, out.String())
		}
	}
	var out, errs bytes.Buffer
	if st := run([]string{"version", "extra"}, &out, &errs); st != 2 || !strings.Contains(errs.String(), `"extra"`) {
		t.Errorf("version extra: status %d, stderr %q", st, errs.String())
	}
}

// stdinFromCapture makes a golden capture the process's standard input
// until the test ends.
func stdinFromCapture(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "testdata", "captures", "rping.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdin
	os.Stdin = f
	t.Cleanup(func() { os.Stdin = saved; f.Close() })
	return f
}

func TestDumpReadsStandardInput(t *testing.T) {
	stdinFromCapture(t)
	var out, errs bytes.Buffer
	if st := run([]string{"dump", "-q", "-"}, &out, &errs); st != 0 {
		t.Fatalf("status %d: %s", st, errs.String())
	}
	if want := "(stdin): 41 RoCEv2 packets (41 icrc ok, 0 icrc bad, 0 malformed), 0 other packets\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}

// "-" reads standard input even after a file that failed, and leaves it
// open.
func TestDumpReadsStandardInputAfterAFailedFile(t *testing.T) {
	f := stdinFromCapture(t)
	var out, errs bytes.Buffer
	run([]string{"dump", "-q", "no-such-file.pcap", "-"}, &out, &errs)
	if !strings.Contains(out.String(), "(stdin): 41 RoCEv2 packets") {
		t.Errorf("stdout %q, stderr %q", out.String(), errs.String())
	}
	if _, err := f.Stat(); err != nil {
		t.Errorf("standard input was closed: %v", err)
	}
}
