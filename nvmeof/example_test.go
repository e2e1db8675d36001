package nvmeof_test

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/nvmeof"
	_ "github.com/rdmago/rdmago/rxe" // the software RoCE device
)

// A target serving 16 MiB of memory as namespace 1 of a subsystem, and a
// host that writes to it and reads it back; both are in one process on
// 127.0.0.1 here, and could as well be two hosts, or a Linux kernel on
// either side.
func ExampleDial() {
	t, err := nvmeof.NewTarget(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	const nqn = "nqn.2026-11.io.rdmago:example"
	if err := t.AddSubsystem(nqn, nvmeof.NewMemory(16<<20)); err != nil {
		fmt.Println(err)
		return
	}
	addr, err := t.Listen("127.0.0.1:0") // port 0: any free port (4420 is NVMe's)
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx := context.Background()
	c, err := nvmeof.Dial(ctx, addr.String(), nqn, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ns, err := c.Namespace(ctx, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("namespace 1: %d bytes in blocks of %d\n", ns.Size(), ns.BlockSize())
	if _, err := ns.WriteAt([]byte("hello, NVMe over RDMA"), 4096); err != nil {
		fmt.Println(err)
		return
	}
	if err := ns.Flush(); err != nil {
		fmt.Println(err)
		return
	}
	buf := make([]byte, 21)
	if _, err := ns.ReadAt(buf, 4096); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s\n", buf)
	// Output:
	// namespace 1: 16777216 bytes in blocks of 512
	// hello, NVMe over RDMA
}

// Discover lists what a target serves, as nvme discover does.
func ExampleDiscover() {
	t, err := nvmeof.NewTarget(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	t.AddSubsystem("nqn.2026-11.io.rdmago:one", nvmeof.NewMemory(1<<20))
	t.AddSubsystem("nqn.2026-11.io.rdmago:two", nvmeof.NewMemory(1<<20))
	addr, err := t.Listen("127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	entries, err := nvmeof.Discover(context.Background(), addr.String(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range entries {
		fmt.Println(e.SubNQN, "at", e.TrAddr)
	}
	// Output:
	// nqn.2026-11.io.rdmago:one at 127.0.0.1
	// nqn.2026-11.io.rdmago:two at 127.0.0.1
}
