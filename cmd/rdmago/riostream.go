package main

import (
	"context"
	"io"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/internal/riostream"
)

// runRiostream is `rdmago riostream`, flag for flag and line for line
// rdma-core's riostream (librdmacm/examples/riostream.c): transfers
// written straight into the peer's mapped buffer over rsockets' iomaps
// (riomap, riowrite), timed, which interoperates with riostream on
// Linux.
func runRiostream(args []string, stdout, stderr io.Writer) int {
	o, err := riostream.ParseArgs(args, stdout, stderr)
	if err != nil {
		return riostream.ExitStatus(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return riostream.ExitStatus(riostream.Run(ctx, o, stdout, stderr))
}
