package main

import (
	"context"
	"io"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/internal/rstream"
)

// runRstream is `rdmago rstream`, flag for flag and line for line
// rdma-core's rstream (librdmacm/examples/rstream.c): ping-pongs and
// bursts over an rsocket (or, with -T s, a TCP socket), timed, which
// interoperates with rstream on Linux.
func runRstream(args []string, stdout, stderr io.Writer) int {
	o, err := rstream.ParseArgs(args, stdout, stderr)
	if err != nil {
		return rstream.ExitStatus(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return rstream.ExitStatus(rstream.Run(ctx, o, stdout, stderr))
}
