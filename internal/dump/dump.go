// Package dump decodes capture files of RoCEv2 traffic into one line per
// packet. It is the engine of `rdmago dump`: the command parses flags and
// names files; this package reads them through internal/pcap, peels the IP
// and UDP headers and parses the RoCEv2 packet with rxe/wire.
package dump

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/internal/pcap"
	"github.com/rdmago/rdmago/rxe/wire"
)

// Options says what to print.
type Options struct {
	// All prints a one-line summary of every packet that is not RoCEv2
	// too (they are always counted).
	All bool
	// AbsTime prints absolute timestamps (RFC 3339) instead of seconds
	// since the file's first packet.
	AbsTime bool
	// Quiet prints only the per-file summary line.
	Quiet bool
	// Port is the UDP destination port that marks RoCEv2 packets
	// (default 4791, wire.UDPPort), as tshark's -d udp.port==N,infiniband.
	Port uint16
}

// Stats counts what a file held.
type Stats struct {
	RoCE      int // RoCEv2 packets (UDP to port 4791)
	ICRCOK    int // RoCEv2 packets whose ICRC verifies
	ICRCBad   int // RoCEv2 packets that parse but whose ICRC does not verify
	Malformed int // RoCEv2 packets that do not parse
	Other     int // packets that are not RoCEv2
}

// OK reports whether every RoCEv2 packet parsed and had a good ICRC.
func (s Stats) OK() bool { return s.ICRCBad == 0 && s.Malformed == 0 }

// String is the summary line printed after a file.
func (s Stats) String() string {
	return fmt.Sprintf("%d RoCEv2 packets (%d icrc ok, %d icrc bad, %d malformed), %d other packets",
		s.RoCE, s.ICRCOK, s.ICRCBad, s.Malformed, s.Other)
}

// File decodes one capture read from r and writes a line per packet to w,
// then the summary line, both prefixed by nothing: the caller names the
// file. It returns what it counted; the error is non-nil if the file could
// not be read to its end (the counts then cover the packets before the
// problem, and the error says at which byte offset it lies).
func File(w io.Writer, r io.Reader, opt Options) (Stats, error) {
	var st Stats
	pr, err := pcap.NewReader(r)
	if err != nil {
		return st, err
	}
	var (
		first time.Time
		line  []byte
	)
	for {
		pkt, err := pr.Next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, err
		}
		if first.IsZero() {
			first = pkt.Time
		}
		line = line[:0]
		line = strconv.AppendInt(line, int64(pkt.Index), 10)
		line = append(line, ' ')
		if opt.AbsTime {
			line = pkt.Time.UTC().AppendFormat(line, time.RFC3339Nano)
		} else {
			line = strconv.AppendFloat(line, pkt.Time.Sub(first).Seconds(), 'f', 6, 64)
		}
		line = append(line, ' ')
		var roce bool
		line, roce = appendPacket(line, &st, pkt, opt.port())
		if roce && !opt.Quiet || opt.All && !opt.Quiet {
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return st, err
			}
		}
	}
}

func (o *Options) port() uint16 {
	if o.Port == 0 {
		return wire.UDPPort
	}
	return o.Port
}

// appendPacket classifies one frame, counts it and appends its description.
func appendPacket(b []byte, st *Stats, pkt pcap.Packet, port uint16) ([]byte, bool) {
	proto, l3, err := pcap.Decode(pkt.LinkType, pkt.Data)
	if err != nil {
		st.Other++
		return append(b, err.Error()...), false
	}
	if proto != 0x0800 && proto != 0x86dd {
		st.Other++
		b = append(b, "ethertype 0x"...)
		return strconv.AppendUint(b, uint64(proto), 16), false
	}
	d, err := wire.ParseDatagram(l3)
	if err != nil {
		st.Other++
		if errors.Is(err, wire.ErrNotUDP) {
			return appendOtherIP(b, l3), false
		}
		return append(b, err.Error()...), false
	}
	b = appendAddrPort(b, d.Src.Unmap().String(), d.SrcPort())
	b = append(b, " > "...)
	b = appendAddrPort(b, d.Dst.Unmap().String(), d.DstPort())
	if d.DstPort() != port {
		st.Other++
		b = append(b, " UDP len="...)
		return strconv.AppendInt(b, int64(len(d.Payload)), 10), false
	}
	st.RoCE++
	var p wire.Packet
	if err := p.Decode(d.Payload); err != nil {
		st.Malformed++
		b = append(b, " MALFORMED "...)
		return append(b, err.Error()...), true
	}
	b = append(b, ' ')
	b = p.AppendSummary(b)
	if d.CheckICRC() {
		st.ICRCOK++
		return append(b, " icrc ok"...), true
	}
	st.ICRCBad++
	b = append(b, " icrc BAD (have 0x"...)
	b = strconv.AppendUint(b, uint64(p.ICRC), 16)
	b = append(b, ", want 0x"...)
	b = strconv.AppendUint(b, uint64(d.ICRC()), 16)
	return append(b, ')'), true
}

// appendOtherIP describes an IP packet that does not carry UDP.
func appendOtherIP(b, ip []byte) []byte {
	var proto byte
	var l4 []byte
	switch {
	case len(ip) >= 20 && ip[0]>>4 == 4:
		proto, l4 = ip[9], ip[int(ip[0]&0xf)*4:]
		b = fmt.Appendf(b, "%d.%d.%d.%d > %d.%d.%d.%d", ip[12], ip[13], ip[14], ip[15], ip[16], ip[17], ip[18], ip[19])
	case len(ip) >= 40 && ip[0]>>4 == 6:
		proto, l4 = ip[6], ip[40:]
		b = append(b, "IPv6"...)
	default:
		return append(b, "IP (truncated)"...)
	}
	switch proto {
	case 6:
		b = append(b, " TCP"...)
		if len(l4) >= 4 {
			b = fmt.Appendf(b, " %d > %d", binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:]))
		}
	case 1, 58:
		b = append(b, " ICMP"...)
	default:
		b = fmt.Appendf(b, " proto %d", proto)
	}
	return b
}

func appendAddrPort(b []byte, addr string, port uint16) []byte {
	b = append(b, addr...)
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(port), 10)
}
