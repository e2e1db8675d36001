// Command rdma_devices is the OFA course's device list program (seed 003,
// "示例设备", p244) in Go: it prints the RDMA devices of the host and the
// attributes each reports.
//
//	rdma_get_devices   rdmacm.GetDevices: the open device contexts the
//	                   connection manager serves
//	ibv_query_device   (*verbs.Context).QueryDevice: struct ibv_device_attr
//	rdma_free_devices  (*rdmacm.DeviceList).Free
//
// beside struct ibv_device's fields: the device's name, node type and
// transport, and, for a device the kernel runs (rdma-core, with the
// rdmacore build tag), its uverbs device and sysfs paths. rdmago's
// software device is always there (one per address of the host, rxe_lo on
// loopback), so the program prints something on any machine:
//
//	go run ./examples/rdma_devices
package main

import (
	"fmt"
	"os"

	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCEv2 device
)

func main() {
	list, err := rdmacm.GetDevices() // rdma_get_devices
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdma_get_devices:", err)
		os.Exit(1)
	}
	defer list.Free() // rdma_free_devices
	fmt.Printf("%d RDMA device(s)\n", len(list.Contexts))
	for i, ctx := range list.Contexts {
		dev := ctx.Device()
		a, err := ctx.QueryDevice() // ibv_query_device
		if err != nil {
			fmt.Fprintf(os.Stderr, "ibv_query_device(%s): %v\n", dev.Name(), err)
			os.Exit(1)
		}
		fmt.Printf("device %d: %s\n", i, dev.Name())
		fmt.Printf("  node type %v, transport %v\n", dev.NodeType(), dev.TransportType())
		if dev.DevName() != "" {
			fmt.Printf("  uverbs device %s (%s), sysfs %s\n", dev.DevName(), dev.DevPath(), dev.IBDevPath())
		}
		fmt.Printf("  firmware %q, node GUID %016x, vendor %#x part %d hw %d\n", a.FWVer, a.NodeGUID, a.VendorID, a.VendorPartID, a.HWVer)
		fmt.Printf("  ports %d, max QPs %d (%d WRs, %d SGEs), CQs %d (%d entries), MRs %d (%d bytes), PDs %d\n",
			a.PhysPortCnt, a.MaxQP, a.MaxQPWR, a.MaxSGE, a.MaxCQ, a.MaxCQE, a.MaxMR, a.MaxMRSize, a.MaxPD)
		fmt.Printf("  SRQs %d (%d WRs), AHs %d, MWs %d, RDMA READs in flight %d per QP, multicast groups %d\n",
			a.MaxSRQ, a.MaxSRQWR, a.MaxAH, a.MaxMW, a.MaxQPRdAtom, a.MaxMcastGrp)
	}
}
