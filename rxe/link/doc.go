// Package link carries RoCEv2 packets between software RDMA devices.
//
// A [Link] moves whole RoCEv2 packets — the UDP payload, from the Base
// Transport Header to the invariant CRC — in batches. It computes the ICRC
// of every packet it sends and checks the ICRC of every packet it receives,
// dropping and counting the bad ones, so the device above it only ever sees
// packets that arrived intact. Two implementations are here:
//
//   - [UDP], the real one: a UDP socket bound to one IP address of the host
//     (the device's GID) and, in production, port 4791 ([wire.UDPPort]). On
//     Linux it reads and writes batches with recvmmsg and sendmmsg through
//     the Go netpoller, sends runs of equal-sized packets to one peer as a
//     single UDP GSO send, and reads runs the kernel has coalesced as single
//     UDP GRO datagrams (see below). There its Send never waits: what
//     the socket has no room for waits in the link's send queue
//     ([SendQueue]), and a goroutine of the link's sends it as room
//     comes.
//   - [Mem], for tests: a link attached to an in-memory [Network] that can
//     drop, duplicate, reorder, delay and corrupt packets, deterministically
//     from a seed.
//
// # Ports
//
// A link sends to the same UDP port number it listens on, and sends from it
// too. Production devices all use 4791; tests give every device one odd port
// and its own loopback address (127.0.0.1, 127.0.0.2, ...), so that test
// packages running in parallel never collide.
//
// # Sharing an address, and whom it is shared with
//
// On Linux, [Shared] lets the processes of a host use one address and
// port at once, as they all use Linux's Soft-RoCE device: one of them
// reads the port and forwards each packet to the process that owns its
// destination QP, over abstract Unix sockets. Those sockets have no
// permissions, so the group of processes on an address is of one
// effective user, as a SO_REUSEPORT group is (the first leader's; root
// may join any): every Unix connection's credentials (SO_PEERCRED) are
// checked both ways, and a process of another user is told that the
// address "is in use by another user's rdmago (uid N)" (the error wraps
// syscall.EADDRINUSE), may neither pass the group packets nor receive
// any, and cannot take a service over. The port's socket itself is
// handed to every member (SCM_RIGHTS), so it stays bound, its packets
// waiting, from one leader to the next: there is no moment when another
// user could bind it. Off Linux, a Shared link is the process's own.
//
// # Segmentation and receive offload
//
// A run of packets to one peer, all of one size but the last, which may be
// shorter, leaves as one sendmmsg message with a UDP_SEGMENT control
// message (UDP GSO, Linux 4.18; the link wants Linux 5): the kernel, or the
// NIC, cuts it into one datagram per packet. RDMAGO_DISABLE_GSO=1 or
// UDPOptions.DisableGSO turns this off.
//
// Receiving, the link asks for UDP_GRO (Linux 5.0) when the kernel has it:
// the kernel then queues a run of datagrams it has coalesced — by GRO in the
// NIC's driver, or, on loopback, a GSO send it never cut up — as one datagram
// with a UDP_GRO control message giving the packet size, so that one
// recvmmsg slot reads the whole run instead of one packet. Since such a
// datagram can hold up to 64 KiB, the link reads up to 8 datagrams per call
// into scratch buffers of 64 KiB allocated with the link, cuts each into
// packets of the given size (the last may be shorter), checks each packet's
// ICRC on its own and copies the good ones into the caller's buffers; the
// traffic class, hop limit and source of a datagram apply to all its
// packets. Packets that do not fit in the slice given to Recv wait in the
// scratch buffers for the next call, which hands them out before reading the
// socket again; a packet too long for its buffer takes a longer buffer of
// the slice in exchange, or waits, and is dropped as Truncated only if it
// is longer than every buffer of the call. Without GRO datagrams land in
// the caller's buffers directly, without the copy, up to 64 per call (with
// it, a stream of single-packet datagrams takes a call per 8).
// TestUDPGROCoalescesDatagramsCutBySoftwareGSO checks GRO proper, through a
// veth pair whose receiving end coalesces datagrams with real headers.
// RDMAGO_DISABLE_GRO=1 or UDPOptions.DisableGRO turns GRO off, and the link
// goes without it if the kernel refuses the option. With GRO the socket's
// drop count (Stats.Overflow) counts datagrams, each of which may have held
// a run of packets.
//
// # The ICRC and the IPv4 header
//
// The ICRC (IBTA vol. 1 Annex A17.3.3) covers the IP and UDP headers too,
// IPv4's identification field and DF flag included, but a program on a UDP
// socket neither writes nor sees those headers. So each side reasons about
// them:
//
//   - Sending, the link computes the ICRC over the headers Linux will write.
//     The UDP socket is put in IP_PMTUDISC_DO mode, so every datagram leaves
//     with DF set; and an unconnected socket sending a DF datagram gets
//     identification 0 (ip_select_ident_segs in the kernel: only connected
//     sockets and non-DF datagrams draw an ID). The pseudo header is
//     therefore {local address, peer, port, port, ID 0, flags DF}, which is
//     what a Linux Soft-RoCE peer, verifying against the real header,
//     expects. A UDP GSO send is cut into datagrams whose IDs count up from
//     0 (inet_gso_segment), and the link computes the ICRC of the k-th
//     packet of such a send with ID k. TestUDPSendsExactPseudoHeader and
//     TestUDPGSOSendsExactPseudoHeader capture the datagrams and check both
//     (the second through a veth pair that makes the kernel segment in
//     software; a NIC that segments UDP in hardware is expected to number
//     the datagrams alike, but that is untested).
//   - Receiving, a UDP socket shows the source address and port (the ICRC
//     covers both) but not the sender's IPv4 ID and flags, which senders set
//     differently (Linux Soft-RoCE draws an ID per datagram). For IPv4 the
//     link therefore accepts a packet if some ID and DF bit make its ICRC
//     match ([wire.PseudoHeader.CheckICRCAnyIPv4ID]); this weakens the check
//     from 32 to 15 bits, on top of the UDP checksum the kernel verifies when
//     the sender sets one. IPv6 has no such fields and is checked exactly
//     ([wire.PseudoHeader.CheckICRC]). The in-memory link knows the ID is 0
//     and checks exactly. A GRO datagram does not show its packets' IPv4
//     headers either, and each of its packets is checked like any other:
//     the k-th packet of a GSO send, which carries ID k, or of a run the
//     NIC coalesced from datagrams with IDs of their own, passes with the
//     ID that makes its ICRC match.
//
// On other systems than Linux the UDP link sends and receives one datagram
// per system call, without GSO or GRO, and cannot ask for DF, so the IPv4 ID and flags are the system's
// choice: peers that check the ICRC loosely (this package) accept the
// packets, Linux Soft-RoCE may not.
package link
