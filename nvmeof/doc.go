// Package nvmeof is NVMe over Fabrics on RDMA: a host that reads and
// writes the namespaces of a remote NVMe subsystem, as Linux's nvme-rdma
// does, and a target that serves files or memory as namespaces, as
// Linux's nvmet-rdma does, both on any verbs device: the software RoCE
// device of package rxe (no root, no kernel module) or RDMA hardware
// through package rdmacore. They speak what the kernel speaks on the
// wire, so a Go host reads a kernel target's disk and a kernel host
// mounts a file system on a Go target.
//
// # Host
//
// Dial connects to a subsystem by address and NQN and brings its
// controller up as the kernel's host does (what writing
// transport=rdma,traddr=...,nqn=... to /dev/nvme-fabrics does): an admin
// queue, Fabrics Connect, CC.EN and CSTS.RDY through Property Set and
// Get, Identify Controller, Set Features (Number of Queues), then the
// I/O queues, each a connection of its own with its Connect. A
// Namespace is then an io.ReaderAt and io.WriterAt over its blocks;
// large transfers are split into commands of at most the controller's
// transfer size, several in flight at once across the I/O queues. Keep
// Alive is sent every half of the keep-alive timeout. Discover reads a
// discovery controller's log page (nvme discover).
//
// Data moves as NVMe over RDMA defines: each command is a 64-byte
// capsule sent with RDMA SEND; the target fetches data the host writes
// with RDMA READ from the host's keyed SGL, or takes it from the capsule
// itself (in-capsule data, up to what the controller's IOCCSZ allows);
// it writes data the host reads with RDMA WRITE; and it answers with a
// 16-byte response capsule. The host's buffers are registered once per
// queue; on a device with type 2 memory windows, each command names its
// data through a window bound for that command alone, which the target
// invalidates with its response (SEND_WITH_INVALIDATE), as Linux's host
// does with fast registration, so that no key outlives its command
// (Options.StaticKeys names the buffers by the queue's one key instead).
//
// # Target
//
// A Target holds subsystems (AddSubsystem), each with namespaces backed
// by Storage (a File, Memory, or anything with ReadAt, WriteAt, Size and
// Sync), and serves them on the addresses it Listens on. Each host's
// admin queue gets a controller of its own (the dynamic model), which
// its I/O queues join by controller ID; a discovery controller lists the
// subsystems. It answers the admin commands Linux's host sends (Identify
// of controllers, namespaces, namespace lists and descriptors; Get Log
// Page; Set and Get Features; Keep Alive; Asynchronous Event Requests,
// held) and Read, Write and Flush; a host that stops sending Keep Alive
// loses its controller after the timeout, and the target goes on serving
// the others. Connection requests carry the RDMA transport's private data
// (queue ID and sizes), and the target answers with its own; a request
// for a subsystem that is not there is refused with Connect's
// invalid-parameter status naming the field.
//
// # From Linux and nvme-cli
//
//	/dev/nvme-fabrics (nvme connect)   Dial
//	nvme discover                      Discover, Controller.DiscoveryLog
//	nvme id-ctrl, nvme list-ns         Controller.Info, Controller.Namespaces
//	nvme id-ns                         Namespace.Info
//	read(2), write(2) on /dev/nvmeXnY  Namespace.ReadAt, Namespace.WriteAt
//	fsync(2)                           Namespace.Flush
//	delete_controller                  Controller.Close
//	nvmet configfs subsystems/         Target.AddSubsystem
//	nvmet configfs ports/              Target.Listen
//	attr_allow_any_host, allowed_hosts TargetOptions.Hosts
//
// The command line is `rdmago nvmeof` (discover, identify, read, write,
// flush, bench, serve). Package wire holds the formats.
//
// Not here: in-band authentication, ANA and multipath, reservations,
// Dataset Management and Write Zeroes, metadata and protection
// information, more than one SGL descriptor per command, and the TCP
// transport.
package nvmeof
