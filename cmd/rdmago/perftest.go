package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/internal/perftest"
)

// perftestCommand returns the command running t, perftest's program of
// the same name.
func perftestCommand(t perftest.Tool) func([]string, io.Writer, io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		o, err := perftest.ParseArgs(t, args)
		if errors.Is(err, perftest.ErrHelp) {
			perftest.Usage(t, stdout)
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", t.Name(), err)
			fmt.Fprintf(stderr, "run 'rdmago %s -h' for the options\n", t.Name())
			return 1
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := perftest.Run(ctx, o, stdout, stderr); err != nil {
			if ctx.Err() != nil {
				return exitInterrupted
			}
			fmt.Fprintf(stderr, " %v\n", err)
			return 1
		}
		return 0
	}
}

func init() {
	for _, t := range perftest.Tools {
		verb := map[perftest.Verb]string{perftest.Send: "SEND", perftest.Write: "RDMA WRITE", perftest.Read: "RDMA READ", perftest.Atomic: "atomic"}[t.Verb]
		what := "bandwidth"
		if t.Lat {
			what = "latency"
		}
		commands[t.Name()] = command{fmt.Sprintf("%s %s over RC, UC or UD QPs, as perftest's %s (interoperates with it)", verb, what, t.Name()), perftestCommand(t)}
	}
}
