package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/fabric"
	_ "github.com/rdmago/rdmago/fabric/tcp" // the tcp provider
	_ "github.com/rdmago/rdmago/fabric/vrb" // the verbs provider
	"github.com/rdmago/rdmago/internal/fiinfo"
	"github.com/rdmago/rdmago/internal/fipingpong"
)

// runFiPingpong is `rdmago fi_pingpong`, libfabric's fi_pingpong on the
// fabric API; it interoperates with the C program.
func runFiPingpong(args []string, stdout, stderr io.Writer) int {
	o, err := fipingpong.ParseArgs(args, stderr)
	if err != nil {
		if errors.Is(err, fipingpong.ErrUsage) {
			return 1
		}
		io.WriteString(stderr, "fi_pingpong: "+err.Error()+"\n")
		var e fabric.Errno
		if errors.As(err, &e) {
			return fipingpong.ExitStatus(err) // as the C program: the errno
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return fipingpong.ExitStatus(fipingpong.Run(ctx, o, stdout, stderr))
}

// runFiInfo is `rdmago fi_info`, libfabric's fi_info.
func runFiInfo(args []string, stdout, stderr io.Writer) int {
	return fiinfo.Run(args, stdout, stderr)
}
