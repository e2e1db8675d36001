package pcap

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// capturesDir holds real pcapng captures of RoCEv2 traffic, taken on a Linux
// Ethernet bridge.
const capturesDir = "../../testdata/captures"

// knownCaptures gives the number of packets and of RoCEv2 (UDP port 4791)
// packets in each capture, as counted independently by
// shared/interop/tools/icrc_check.py.
var knownCaptures = map[string]struct{ packets, roce int }{
	"host_peer.pcapng":       {31, 20},
	"ib_atomic_cas.pcapng":   {49, 10},
	"ib_atomic_fadd.pcapng":  {49, 10},
	"ib_read_bw.pcapng":      {54, 15},
	"ib_send_lat.pcapng":     {51, 20},
	"ib_write_bw.pcapng":     {54, 15},
	"rc_pingpong.pcapng":     {32, 20},
	"rc_pingpong_mtu.pcapng": {36, 24},
	"rping.pcapng":           {41, 41},
	"send_imm.pcapng":        {20, 6},
	"ud_pingpong.pcapng":     {21, 10},
	"write_imm.pcapng":       {20, 6},
	"write_imm_mtu.pcapng":   {20, 6},
}

func TestRealCaptures(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(capturesDir, "*.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no captures in %s", capturesDir)
	}
	for _, path := range paths {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			if r.Format() != "pcapng" {
				t.Errorf("Format() = %q", r.Format())
			}
			packets, roce := 0, 0
			for {
				p, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("after %d packets: %v", packets, err)
				}
				packets++
				if p.Index != packets {
					t.Errorf("packet %d has Index %d", packets, p.Index)
				}
				if y := p.Time.Year(); y < 2020 || y > 2100 {
					t.Errorf("packet %d has implausible time %v", p.Index, p.Time)
				}
				proto, ip, err := Decode(p.LinkType, p.Data)
				if err != nil || proto != EtherTypeIPv4 {
					t.Fatalf("packet %d: Decode(%v) = %#04x, %v; want IPv4", p.Index, p.LinkType, proto, err)
				}
				if isRoCEv2(ip) {
					roce++
				}
			}
			if packets == 0 {
				t.Fatal("no packets")
			}
			if want, ok := knownCaptures[name]; ok && (packets != want.packets || roce != want.roce) {
				t.Errorf("got %d packets, %d RoCEv2; want %d, %d", packets, roce, want.packets, want.roce)
			}
		})
	}
}

// isRoCEv2 reports whether ip is an IPv4 UDP datagram to port 4791.
func isRoCEv2(ip []byte) bool {
	if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 17 {
		return false
	}
	ihl := int(ip[0]&0x0f) * 4
	return len(ip) >= ihl+8 && binary.BigEndian.Uint16(ip[ihl+2:]) == 4791
}

func TestRealCaptureTimestamp(t *testing.T) {
	f, err := os.Open(filepath.Join(capturesDir, "rping.pcapng"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	// The interface has if_tsresol 9: the first Enhanced Packet Block holds
	// 1795289687604327800 nanoseconds.
	if want := time.Unix(1795289687, 604327800).UTC(); !p.Time.Equal(want) {
		t.Errorf("first packet time = %v, want %v", p.Time, want)
	}
	if p.LinkType != LinkTypeEthernet || p.Offset != 284 || len(p.Data) != 322 || p.OrigLen != 322 {
		t.Errorf("first packet = %v, offset %d, %d of %d bytes; want Ethernet, 284, 322 of 322", p.LinkType, p.Offset, len(p.Data), p.OrigLen)
	}
}
