// Package tool is the one shape of rdmago's commands: a command parses its
// arguments, runs, and ends with a process exit status. A command's
// package offers its parser and its run; Main joins them, so that the
// command line (cmd/rdmago) only dispatches.
package tool

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// Main is a command: it parses args, runs until it is done or ctx ends
// (Ctrl-C), writes its output to stdout and its diagnostics to stderr,
// and returns the process exit status.
type Main func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Interrupted is the exit status of a command stopped by Ctrl-C: 128 +
// SIGINT, what a shell reports for a C program that the signal killed.
const Interrupted = 130

// ExitError ends a command with Status. The command has printed what it
// had to say about it; Msg is for programs and logs.
type ExitError struct {
	Status int
	Msg    string
}

func (e *ExitError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("exit status %d", e.Status)
	}
	return e.Msg
}

// Failf is an *ExitError with status 1.
func Failf(format string, args ...any) error {
	return &ExitError{Status: 1, Msg: fmt.Sprintf(format, args...)}
}

// Status is the exit status after err: 0 for nil, an *ExitError's
// Status, Interrupted when the run was cancelled, and 1 otherwise.
func Status(err error) int {
	var e *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Status
	case errors.Is(err, context.Canceled):
		return Interrupted
	}
	return 1
}

// Of makes a Main of a command's parser, run and exit status: parse
// prints what it must (usage for -h, a message for a bad flag) and
// returns an error that status maps to the exit status, or nil for a run.
func Of[O any](parse func(args []string, stdout, stderr io.Writer) (O, error),
	run func(ctx context.Context, o O, stdout, stderr io.Writer) error,
	status func(error) int) Main {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		o, err := parse(args, stdout, stderr)
		if err != nil {
			return status(err)
		}
		return status(run(ctx, o, stdout, stderr))
	}
}

// ParseInterspersed parses flags that may come before, between or after
// the positional arguments, as GNU tools allow, and returns the positional
// ones; "--" ends the flags. rdmago's own tools (demo, dump), which have
// no C original to follow, take Go's flag syntax through it.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// FlagStatus is the exit status after a flag package parse error: 0 for
// -h, 2 otherwise.
func FlagStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
