package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rdmago/rdmago/internal/tool"
)

// Main is the command of perftest's program t (rdmago ib_write_bw and its
// siblings): its options, then Run.
func Main(t Tool) tool.Main {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		o, err := ParseArgs(t, args)
		if errors.Is(err, ErrHelp) {
			Usage(t, stdout)
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", t.Name(), err)
			fmt.Fprintf(stderr, "run 'rdmago %s -h' for the options\n", t.Name())
			return 1
		}
		if err := Run(ctx, o, stdout, stderr); err != nil {
			if ctx.Err() != nil {
				return tool.Interrupted
			}
			fmt.Fprintf(stderr, " %v\n", err)
			return 1
		}
		return 0
	}
}

// Summary is the line `rdmago help` shows for t.
func (t Tool) Summary() string {
	verb := map[Verb]string{Send: "SEND", Write: "RDMA WRITE", Read: "RDMA READ", Atomic: "atomic"}[t.Verb]
	what := "bandwidth"
	if t.Lat {
		what = "latency"
	}
	return fmt.Sprintf("%s %s over RC, UC or UD QPs, as perftest's %s (interoperates with it)", verb, what, t.Name())
}
