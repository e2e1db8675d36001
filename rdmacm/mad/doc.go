// Package mad holds the wire format of the InfiniBand Communication Manager
// (IBTA vol. 1 ch. 12) as the Linux rdma_cm speaks it: the common MAD header,
// the CM message bodies and rdma_cm's private-data header.
//
// Over RoCEv2 a CM message is a 256-byte management datagram (MAD) sent as a
// UD SEND_ONLY to QP 1 (Q_Key 0x80010000):
//
//	IP | UDP 4791 | BTH | DETH | MAD (256 bytes) | ICRC
//
// The MAD starts with the 24-byte common header (IBTA vol. 1 §13.4;
// struct ib_mad_hdr in Linux), followed by 232 bytes of message body:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        TransactionID                          |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      AttributeModifier                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// CM MADs have base version 1, management class 0x07 and class version 2,
// and travel with method Send (0x03). The attribute ID names the message:
// [REQ], [MRA], [REJ], [REP], [RTU], [DREQ], [DREP], [SIDRREQ] and
// [SIDRREP] (IBTA vol. 1 §12.6; the Byte[Bit] tables of Linux
// include/rdma/ibta_vol1_c12.h). Every field of every message is a typed Go
// struct field; private data and the other fixed areas are arrays of their
// exact wire size, so messages compare with ==. The alternate path
// messages LAP (0x0019) and APR (0x001A), which rdma_cm does not send, are
// not implemented: [Decode] reports them as unsupported, and a caller can
// still reach their bytes through [ParseMAD] or supply its own [Message].
//
// # Decoding
//
// [ParseMAD] checks the MAD's length and version fields and returns its
// [Header] and body; [Decode] also checks the method, picks the message type
// from the attribute ID and unmarshals the body. Both treat their input as
// untrusted: they never panic, and their errors name the offending field and
// its byte offset in the MAD (see [FieldError] and the Err variables).
// Decoding is deliberately lenient about values the CM itself answers with
// a REJ (an unsupported path MTU, a transport type, a rate, ...) so that the
// CM can still learn the communication ID to reject; it refuses only values
// that leave a message meaningless: a reject-info or additional-info length
// beyond its 72-byte area, and the reserved code 3 of the REJ and MRA
// message fields. Reserved bits are ignored on receipt and sent as zero, as
// IBTA requires.
//
// # Encoding
//
// Each message's Append method appends its 232-byte body to a caller's
// buffer; [AppendMAD] and [Marshal] prepend the header. Encoders check that
// every field fits its bits (a 24-bit QPN, a 20-bit flow label, ...) and
// fail with a [*FieldError] instead of truncating.
//
// # rdma_cm
//
// rdma_cm (Linux drivers/infiniband/core/cma.c) starts the private data of
// a REQ or SIDR_REQ with a 36-byte [CMAHeader] (struct cma_hdr) carrying
// the IP addresses and the active side's port, leaving 56 bytes of a REQ's
// and 180 bytes of a SIDR_REQ's private data to the application, and names
// the listening port in the service ID: (port space << 16) + port, see
// [MakeServiceID] and [ServiceID.Split].
//
// The package does no I/O and keeps no state.
package mad
