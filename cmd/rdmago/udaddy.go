package main

import (
	"context"
	"io"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/internal/udaddy"
)

// runUdaddy is `rdmago udaddy`, rdma-core's udaddy: UD datagrams between
// peers that find each other through rdma_cm's UDP port space (SIDR); it
// interoperates with udaddy on Linux.
func runUdaddy(args []string, stdout, stderr io.Writer) int {
	o, err := udaddy.ParseArgs(args, stdout, stderr)
	if err != nil {
		return udaddy.ExitStatus(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return udaddy.ExitStatus(udaddy.Run(ctx, o, stdout, stderr))
}
