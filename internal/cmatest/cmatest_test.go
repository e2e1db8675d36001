package cmatest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/internal/tool"
)

func TestNumberTakesStrtolFormsWithinRange(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want int
		ok   bool
	}{
		{"10", 10, true}, {"0x111", 0x111, true}, {"010", 8, true}, {"0", 0, true},
		{"-1", 0, false}, {"1025", 0, false}, {"ten", 0, false}, {"", 0, false},
	} {
		got, err := Number(tc.arg, 0, 1024)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Number(%q) = %d, %v", tc.arg, got, err)
		}
	}
}

func TestExitStatusOfEachEnding(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0}, {&tool.ExitError{Status: 0, Msg: "help"}, 0}, {tool.Failf("x %d", 1), 1},
		{fmt.Errorf("wrapped: %w", &tool.ExitError{Status: 3}), 3}, {context.Canceled, 130}, {io.EOF, 1},
	} {
		if got := tool.Status(tc.err); got != tc.want {
			t.Errorf("tool.Status(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestParseReportsAsTheCToolsDo(t *testing.T) {
	usage := func(w io.Writer) { fmt.Fprint(w, "usage: tool\n") }
	for _, tc := range []struct {
		args           string
		status         int
		stdout, stderr string
	}{
		{"-h", 0, "usage: tool", ""},
		{"-q", 1, "usage: tool", "tool: invalid option -- 'q'"},
		{"-a", 1, "usage: tool", "option requires an argument -- 'a'"},
		{"-b extra", 1, "", `tool: "extra": tool takes no operands`},
	} {
		var out, errs bytes.Buffer
		_, _, err := Parse("tool", strings.Fields(tc.args), "a:b", usage, &out, &errs)
		if tool.Status(err) != tc.status || err == nil || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errs.String(), tc.stderr) {
			t.Errorf("%q: %v (status %d)\nstdout %q\nstderr %q", tc.args, err, tool.Status(err), out.String(), errs.String())
		}
	}
	_, opts, err := Parse("tool", []string{"-a1", "-b"}, "a:b", usage, io.Discard, io.Discard)
	if err != nil || len(opts) != 2 || opts[0].Arg != "1" {
		t.Errorf("good flags: %+v, %v", opts, err)
	}
}
