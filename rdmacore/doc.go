// Package rdmacore is the verbs provider for RDMA hardware: rdma-core's
// libibverbs and librdmacm through cgo. Built with the rdmacore build tag
// on Linux, importing it makes the host's RDMA devices (mlx5_0, irdma0,
// the kernel's Soft-RoCE rxe0 ...) appear in verbs.Devices beside the
// software devices of package rxe, and makes package rdmacm use the
// kernel's connection manager for them. Programs do not change:
//
//	import (
//		_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices with -tags rdmacore
//		_ "github.com/rdmago/rdmago/rxe"      // the software device
//	)
//
//	go build -tags rdmacore ./...   # needs libibverbs-dev and librdmacm-dev
//
// Without the tag the package is empty and nothing needs cgo. With the tag
// but without cgo (CGO_ENABLED=0) the build fails with a message saying
// so.
//
// # Choosing a provider
//
// verbs.Devices lists the devices of every imported provider, and
// rdmacm picks the device that serves an address. On a host whose kernel
// runs RoCE itself (a real NIC, or Soft-RoCE attached with `rdma link
// add`), set RDMAGO_PROVIDER=rdmacore so that the software device does not
// also claim the host's addresses and UDP port 4791; RDMAGO_PROVIDER=rxe
// does the opposite. Tools take a device by name as always (-d rxe0).
//
// # Memory the device may touch
//
// A memory region's buffer is read and written by the device behind the Go
// runtime's back, at any time until the region is deregistered. RegMR
// therefore pins the buffer (runtime.Pinner) for the life of the region:
// the garbage collector neither moves nor frees it, even if the program
// drops every other reference, until MR.Dereg (or Context.Close, which
// deregisters what is left). Any []byte works, from make or from
// off-heap memory such as syscall.Mmap; a region that is never
// deregistered keeps its memory for the life of the process. The device
// checks every SGE against the region's bounds (a bad one completes with
// IBV_WC_LOC_PROT_ERR); inline sends, which the library copies itself, are
// checked here first, so a wrong address is an error and never a stray
// read. Programs run with the default cgocheck; the provider stores no Go
// pointer in C memory except pinned buffers.
//
// # What it maps
//
// The whole verbs driver contract (devices, contexts, PDs, MRs with every
// access flag, memory windows of both types, AHs, CQs with completion
// channels and CQ.Wait, SRQs, RC/UC/UD QPs, every work request, multicast,
// asynchronous events) and the rdmacm backend (IDs, event channels,
// address and route resolution, listen, connect, accept, reject,
// disconnect, private data, the UDP port space). Completions are polled
// from the device's CQ straight into the caller's slice: no goroutine and
// no extra copy per completion.
package rdmacore
