package fipingpong

import (
	"context"
	"errors"
	"io"

	"github.com/rdmago/rdmago/fabric"
	_ "github.com/rdmago/rdmago/fabric/sockets" // the sockets provider
	_ "github.com/rdmago/rdmago/fabric/tcp"     // the tcp provider
	_ "github.com/rdmago/rdmago/fabric/udp"     // the udp provider
	_ "github.com/rdmago/rdmago/fabric/vrb"     // the verbs provider
)

// Main is `rdmago fi_pingpong`, libfabric's fi_pingpong on the fabric API:
// its options, then Run. It exits as the C program does: with the errno
// of a failed fabric call, 1 after a usage message.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := ParseArgs(args, stderr)
	if err != nil {
		if errors.Is(err, ErrUsage) {
			return 1
		}
		io.WriteString(stderr, "fi_pingpong: "+err.Error()+"\n")
		var e fabric.Errno
		if errors.As(err, &e) {
			return ExitStatus(err) // as the C program: the errno
		}
		return 2
	}
	return ExitStatus(Run(ctx, o, stdout, stderr))
}
