package wire_test

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/internal/pcap"
	"github.com/rdmago/rdmago/nvmeof/wire"
	"github.com/rdmago/rdmago/rdmacm/mad"
	rwire "github.com/rdmago/rdmago/rxe/wire"
)

// rocePackets returns the RoCEv2 packets of a capture.
func rocePackets(t *testing.T, file string) []rwire.Packet {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcap.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []rwire.Packet
	for {
		p, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		proto, ip, err := pcap.Decode(p.LinkType, p.Data)
		if err != nil || proto != pcap.EtherTypeIPv4 && proto != pcap.EtherTypeIPv6 {
			continue
		}
		d, err := rwire.ParseDatagram(ip)
		if err != nil || d.DstPort() != 4791 {
			continue
		}
		pkt, err := rwire.Parse(append([]byte(nil), d.Payload...))
		if err != nil {
			t.Fatalf("packet %d: %v", len(out), err)
		}
		out = append(out, pkt)
	}
}

// TestLinuxCaptureDecodes reads what Linux's NVMe/RDMA host and target
// said to each other: the transport's private data in rdma_cm's REQ and
// REP, the Fabrics Connect capsule, its data (fetched by RDMA READ) and
// its response (a SEND_WITH_INVALIDATE of the Connect's key), and every
// other capsule; each command writes back to the bytes it was read from.
func TestLinuxCaptureDecodes(t *testing.T) {
	pkts := rocePackets(t, "testdata/connect_read_write.pcapng")
	var (
		reqs                        []wire.CMReq
		rep                         bool
		connect                     *wire.Command
		ioConnects                  int
		commands, completions, data int
		reads                       int
	)
	partial := map[uint32][]byte{} // SENDs in several packets, by destination QP
	for i, p := range pkts {
		op := p.OpCode()
		switch op {
		case rwire.RCSendFirst:
			partial[p.BTH.DestQP()] = append([]byte(nil), p.Payload...)
			continue
		case rwire.RCSendMiddle:
			partial[p.BTH.DestQP()] = append(partial[p.BTH.DestQP()], p.Payload...)
			continue
		case rwire.RCSendLast:
			// The whole message, processed as one SEND.
			p.Payload = append(partial[p.BTH.DestQP()], p.Payload...)
			delete(partial, p.BTH.DestQP())
			op = rwire.RCSendOnly
		}
		switch {
		case op == rwire.UDSendOnly:
			_, m, err := mad.Decode(p.Payload)
			if err != nil {
				continue
			}
			switch m := m.(type) {
			case *mad.REQ:
				_, user, err := m.CMAHeader()
				if err != nil {
					t.Fatalf("packet %d: REQ's CMA header: %v", i, err)
				}
				r, err := wire.ParseCMReq(user)
				if err != nil {
					t.Fatal(err)
				}
				var back [wire.CMReqLen]byte
				copy(back[:], r.Bytes())
				if string(back[:10]) != string(user[:10]) {
					t.Errorf("REQ private data %+v writes back as % x, was % x", r, back[:10], user[:10])
				}
				reqs = append(reqs, r)
			case *mad.REP:
				r, err := wire.ParseCMRep(m.PrivateData[:])
				if err != nil {
					t.Fatal(err)
				}
				if r.RecFmt != 0 || r.CRQSize == 0 {
					t.Errorf("REP private data %+v", r)
				}
				rep = true
			}
		case op == rwire.RCSendOnly && len(p.Payload) >= wire.CommandLen:
			c, err := wire.ParseCommand(p.Payload)
			if err != nil {
				t.Fatal(err)
			}
			var back [wire.CommandLen]byte
			c.Put(back[:])
			if string(back[:]) != string(p.Payload[:wire.CommandLen]) {
				t.Errorf("packet %d: command %+v writes back as % x, was % x", i, c, back, p.Payload)
			}
			if c.Flags&wire.PSDTMask != wire.PSDTSGLMeta {
				t.Errorf("packet %d: flags %#x: Linux's host uses SGLs", i, c.Flags)
			}
			if c.Opcode == wire.OpFabrics && c.FCType == wire.FCTypeConnect {
				inCapsule := c.SGL.Type == wire.SGLDataBlock && c.SGL.Subtype == wire.SGLOffset
				if c.SGL.Length != wire.ConnectDataLen || c.SGL.Type != wire.SGLKeyedBlock && !inCapsule {
					t.Errorf("Connect %+v: want its 1024 bytes of data in a keyed block or in the capsule", c)
				}
				if inCapsule {
					// The I/O queue's Connect carries its data: the target
					// offered in-capsule data on it.
					d, err := wire.ParseConnectData(p.Payload[wire.CommandLen+int(c.SGL.Addr):])
					if err != nil || d.SubNQN != "testnqn" || d.CNTLID == 0xffff {
						t.Errorf("in-capsule Connect data %+v (%v): want testnqn on the admin queue's controller", d, err)
					}
					data++
				}
				switch {
				case connect == nil && c.ConnectQID() == 0:
					connect = &c
				case c.ConnectQID() == 1:
					ioConnects++
				}
			}
			if c.Opcode == wire.NVMRead && c.NSID == 1 {
				reads++
			}
			commands++
		case (op == rwire.RCSendOnly || op == rwire.RCSendOnlyWithInvalidate) && len(p.Payload) == wire.CompletionLen:
			c, err := wire.ParseCompletion(p.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if !c.OK() {
				t.Errorf("packet %d: completion %+v failed", i, c)
			}
			if op == rwire.RCSendOnlyWithInvalidate && connect != nil && c.CID == connect.CID && p.IETH.RKey() != connect.SGL.Key {
				t.Errorf("Connect's response invalidates key %#x, want the Connect's %#x", p.IETH.RKey(), connect.SGL.Key)
			}
			completions++
		case op == rwire.RCReadResponseOnly && len(p.Payload) == wire.ConnectDataLen:
			d, err := wire.ParseConnectData(p.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if d.SubNQN != "testnqn" || !strings.HasPrefix(d.HostNQN, "nqn.") || d.CNTLID != 0xffff {
				t.Errorf("Connect data %+v: want subsystem testnqn, a host NQN, any controller", d)
			}
			data++
		}
	}
	// Linux's host asks for an admin queue of 32 entries (NVME_AQ_DEPTH),
	// then an I/O queue of 128.
	want := []wire.CMReq{{QID: 0, HRQSize: 32, HSQSize: 31}, {QID: 1, HRQSize: 128, HSQSize: 127}}
	if len(reqs) != 2 || reqs[0] != want[0] || reqs[1] != want[1] {
		t.Errorf("REQs' private data %+v, want %+v", reqs, want)
	}
	if !rep || connect == nil || ioConnects != 1 || data != 2 {
		t.Fatalf("REP %v, admin Connect %v, I/O Connects %d, Connect data %d: the capture's connections were not all found",
			rep, connect != nil, ioConnects, data)
	}
	if commands < 10 || completions < 10 || reads < 2 {
		t.Fatalf("%d commands (%d reads), %d completions: fewer than the capture holds", commands, reads, completions)
	}
	t.Logf("%d commands (%d reads), %d completions", commands, reads, completions)
}
