// Package pcap reads packet capture files in the classic pcap format and in
// the pcapng format, and strips link-layer headers down to the network-layer
// packet.
//
// A [Reader] detects the format from the first four bytes of its input and
// then returns one [Packet] per call to [Reader.Next]:
//
//	r, err := pcap.NewReader(f)
//	...
//	for {
//		p, err := r.Next()
//		if err == io.EOF {
//			break
//		}
//		if err != nil {
//			return err // a *pcap.Error naming the offset of the bad record
//		}
//		proto, ip, err := pcap.Decode(p.LinkType, p.Data)
//		...
//	}
//
// The Reader treats its input as untrusted: every length is checked before it
// is used, no packet larger than [MaxPacketLen] and no pcapng block larger
// than [MaxBlockLen] is accepted, and a malformed or truncated file produces
// an [*Error] rather than a panic or a silently shortened packet list. The
// Reader reuses a single data buffer, so reading packets does not allocate
// once that buffer has grown to the largest packet.
//
// Supported pcapng blocks are the Section Header Block (any number of
// sections, each in its own byte order), the Interface Description Block
// (with the if_tsresol and if_tsoffset options), the Enhanced Packet Block,
// the Simple Packet Block and the obsolete Packet Block. All other block types
// are skipped.
package pcap
