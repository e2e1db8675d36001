package main

import (
	"context"
	"io"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/internal/mckey"
)

// runMckey is `rdmago mckey`, rdma-core's mckey: UD datagrams to a
// multicast group joined through rdma_cm (rdma_join_multicast); it
// interoperates with mckey on Linux.
func runMckey(args []string, stdout, stderr io.Writer) int {
	o, err := mckey.ParseArgs(args, stdout, stderr)
	if err != nil {
		return mckey.ExitStatus(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return mckey.ExitStatus(mckey.Run(ctx, o, stdout, stderr))
}
