package rdmacore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core's devices, when built with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software device
	"github.com/rdmago/rdmago/verbs"
)

// A program imports the providers it may use and runs unchanged on
// either: built with -tags rdmacore on a host with RDMA hardware (or
// kernel Soft-RoCE), verbs.Devices lists rdma-core's devices, and the
// connection manager uses the kernel's rdma_cm for them. With
// RDMAGO_PROVIDER=rdmacore the software devices are left out.
func Example() {
	devs, err := verbs.Devices()
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range devs {
		fmt.Println(d.Name(), d.NodeType(), d.TransportType())
	}
	// Dial and Listen pick the device that serves the address, and its
	// connection manager.
	conn, err := rdmacm.Dial(context.Background(), "10.77.0.12:7471", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
}
