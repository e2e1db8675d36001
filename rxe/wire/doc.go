// Package wire holds the RoCEv2 packet formats of the InfiniBand Architecture
// Specification (IBTA vol. 1 ch. 9 and Annex A17): the Base Transport Header,
// the extended transport headers, the opcode table, the invariant CRC and the
// IP/UDP encapsulation.
//
// A RoCEv2 packet travels as the payload of a UDP datagram sent to port 4791:
//
//	IP | UDP | BTH | [DETH|XRCETH] [FETH] [RETH|AtomicETH] [ImmDt|IETH] [AETH] [AtomicAckETH] | payload | pad | ICRC
//
// Headers are views over byte slices, in the manner of gVisor's tcpip/header:
// a BTH is a []byte with accessor methods. The only way to obtain views from
// untrusted bytes is [Parse] (or [Packet.Decode]), which checks the packet's
// length, opcode, pad count and transport version against the opcode table
// once; after that the accessors need no bounds checks. Packets are built by
// appending into a caller's buffer with [AppendPacket], and the ICRC is filled
// in with [SetICRC].
//
// The package does no I/O, keeps no state and does not allocate on the
// parse or build paths. It knows nothing of queue pairs.
package wire
