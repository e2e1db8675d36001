package main

import (
	"context"
	"io"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/internal/rping"
)

// runRping is `rdmago rping`, flag for flag and line for line rdma-core's
// rping (librdmacm/examples/rping.c): a ping-pong of RDMA READs and
// WRITEs over an RC connection made with the connection manager, which
// interoperates with rping on Linux.
func runRping(args []string, stdout, stderr io.Writer) int {
	o, err := rping.ParseArgs(args, stdout, stderr)
	if err != nil {
		return rping.ExitStatus(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return rping.ExitStatus(rping.Run(ctx, o, stdout, stderr))
}
