package tool

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"testing"
)

func TestStatusOfEachKindOfError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{&ExitError{Status: 255, Msg: "listen"}, 255},
		{fmt.Errorf("wrapped: %w", &ExitError{Status: 7}), 7},
		{&ExitError{Status: 0, Msg: "help"}, 0},
		{context.Canceled, Interrupted},
		{fmt.Errorf("run: %w", context.Canceled), Interrupted},
		{errors.New("anything else"), 1},
		{Failf("bad %s", "flag"), 1},
	} {
		if got := Status(c.err); got != c.want {
			t.Errorf("Status(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestOfRunsOnlyWhatParses(t *testing.T) {
	ran := 0
	parse := func(args []string, stdout, stderr io.Writer) (string, error) {
		if len(args) > 0 && args[0] == "-x" {
			fmt.Fprintln(stderr, "bad flag -x")
			return "", &ExitError{Status: 2, Msg: "usage"}
		}
		return "ok", nil
	}
	run := func(ctx context.Context, o string, stdout, stderr io.Writer) error {
		ran++
		if o != "ok" {
			return errors.New("options lost")
		}
		return ctx.Err()
	}
	main := Of(parse, run, Status)
	var out, errw bytes.Buffer
	if st := main(context.Background(), []string{"-x"}, &out, &errw); st != 2 || ran != 0 || errw.String() != "bad flag -x\n" {
		t.Fatalf("bad flag: status %d, runs %d, stderr %q", st, ran, errw.String())
	}
	if st := main(context.Background(), nil, &out, &errw); st != 0 || ran != 1 {
		t.Fatalf("good run: status %d, runs %d", st, ran)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if st := main(ctx, nil, &out, &errw); st != Interrupted {
		t.Fatalf("interrupted run: status %d, want %d", st, Interrupted)
	}
}

func TestParseInterspersedTakesFlagsAnywhere(t *testing.T) {
	for _, c := range []struct {
		args []string
		q    bool
		pos  []string
	}{
		{[]string{"a", "-q", "b"}, true, []string{"a", "b"}},
		{[]string{"-q", "a"}, true, []string{"a"}},
		{[]string{"a", "--", "-q"}, false, []string{"a", "-q"}},
		{nil, false, nil},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		q := fs.Bool("q", false, "")
		pos, err := ParseInterspersed(fs, c.args)
		if err != nil || *q != c.q || !slices.Equal(pos, c.pos) {
			t.Errorf("%q: -q %v, positional %q, err %v; want -q %v, %q", c.args, *q, pos, err, c.q, c.pos)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_, err := ParseInterspersed(fs, []string{"-h"})
	if FlagStatus(err) != 0 {
		t.Errorf("-h: status %d, want 0", FlagStatus(err))
	}
	_, err = ParseInterspersed(fs, []string{"-nosuch"})
	if FlagStatus(err) != 2 {
		t.Errorf("-nosuch: status %d, want 2", FlagStatus(err))
	}
}
