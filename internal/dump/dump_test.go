package dump

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/internal/pcap"
)

const captures = "../../testdata/captures"

// tsharkCounts reads testdata/captures/tshark_counts.txt: per file, the
// packets tshark decodes as InfiniBand and all packets.
func tsharkCounts(t *testing.T) map[string][2]int {
	t.Helper()
	f, err := os.Open(filepath.Join(captures, "tshark_counts.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][2]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		roce, _ := strconv.Atoi(fields[1])
		all, _ := strconv.Atoi(fields[2])
		out[fields[0]] = [2]int{roce, all}
	}
	if len(out) == 0 {
		t.Fatal("no counts in tshark_counts.txt")
	}
	return out
}

func dumpFile(t *testing.T, name string, opt Options) (Stats, string, error) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := File(&out, bytes.NewReader(data), opt)
	return st, out.String(), err
}

func TestFileCountsMatchTshark(t *testing.T) {
	for name, want := range tsharkCounts(t) {
		t.Run(name, func(t *testing.T) {
			st, out, err := dumpFile(t, filepath.Join(captures, name), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if st.RoCE != want[0] || st.RoCE+st.Other != want[1] {
				t.Errorf("RoCE %d of %d packets, tshark says %d of %d", st.RoCE, st.RoCE+st.Other, want[0], want[1])
			}
			if !st.OK() || st.ICRCOK != st.RoCE {
				t.Errorf("stats %v", st)
			}
			if lines := strings.Count(out, "\n"); lines != st.RoCE {
				t.Errorf("%d lines printed for %d RoCEv2 packets", lines, st.RoCE)
			}
			if strings.Count(out, " icrc ok\n") != st.RoCE {
				t.Errorf("not every line ends in icrc ok:\n%s", out)
			}
		})
	}
}

// TestFileCountsMatchLiveTshark checks the recorded counts against tshark
// itself, where it is installed (.ci/run installs it).
func TestFileCountsMatchLiveTshark(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed: checked against the recorded counts only")
	}
	for name, want := range tsharkCounts(t) {
		cmd := exec.Command("tshark", "-r", filepath.Join(captures, name), "-d", "udp.port==4791,infiniband", "-Y", "infiniband")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", name, err)
		}
		if got := strings.Count(string(out), "\n"); got != want[0] {
			t.Errorf("%s: tshark decodes %d InfiniBand packets now, recorded %d", name, got, want[0])
		}
	}
}

func TestFilePrintsHeaderFields(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"rc_pingpong.pcapng", []string{
			"10.77.0.12:", " > 10.77.0.11:4791 RC_SEND_ONLY qp=0x000011 psn=0xa43232 ackreq len=64 icrc ok",
			"RC_ACKNOWLEDGE qp=0x000011 psn=0xa43232 ACK credits=unlimited msn=0x000001 len=0 icrc ok"}},
		{"ud_pingpong.pcapng", []string{"UD_SEND_ONLY", "qkey=0x11111111 srcqp=0x"}},
		{"ib_atomic_cas.pcapng", []string{"RC_COMPARE_SWAP", "swap=0x", "compare=0x", "RC_ATOMIC_ACKNOWLEDGE", "orig=0x"}},
		{"ib_atomic_fadd.pcapng", []string{"RC_FETCH_ADD", "add=0x"}},
		{"ib_read_bw.pcapng", []string{"RC_RDMA_READ_REQUEST", "dmalen=2048 len=0", "RC_RDMA_READ_RESPONSE_FIRST", "len=1024"}},
		{"write_imm.pcapng", []string{"RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "imm=0x00001000", "imm=0x00001002"}},
		{"send_imm.pcapng", []string{"RC_SEND_ONLY_WITH_IMMEDIATE", "imm=0x"}},
		{"rping.pcapng", []string{":55410 > 10.77.0.11:4791 UD_SEND_ONLY qp=0x000001", "qkey=0x80010000 srcqp=0x000001 len=256"}},
	}
	for _, tt := range tests {
		_, out, err := dumpFile(t, filepath.Join(captures, tt.file), Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tt.file, w, out)
			}
		}
	}
}

func TestFileAllPrintsEveryPacket(t *testing.T) {
	st, out, err := dumpFile(t, filepath.Join(captures, "rc_pingpong.pcapng"), Options{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(out, "\n"); lines != st.RoCE+st.Other {
		t.Errorf("-a printed %d lines for %d packets", lines, st.RoCE+st.Other)
	}
	if !strings.Contains(out, "TCP ") || !strings.Contains(out, " > 18515") {
		t.Errorf("-a output lacks the TCP 18515 exchange:\n%s", out)
	}
	_, out, _ = dumpFile(t, filepath.Join(captures, "rc_pingpong.pcapng"), Options{Quiet: true})
	if out != "" {
		t.Errorf("-q printed %q", out)
	}
}

// packetAt returns the file offset of the RoCE payload of the n-th RoCEv2
// packet in data.
func roceOffsets(t *testing.T, data []byte) []int {
	t.Helper()
	r, err := pcap.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var offs []int
	for {
		p, err := r.Next()
		if err == io.EOF {
			return offs
		}
		if err != nil {
			t.Fatal(err)
		}
		// Enhanced packet block: 28 bytes before the frame; Ethernet
		// 14, IPv4 20, UDP 8.
		if len(p.Data) > 42 && p.Data[36] == 0x12 && p.Data[37] == 0xb7 {
			offs = append(offs, int(p.Offset)+28+42)
		}
	}
}

func TestFileReportsBadICRCAndMalformedPackets(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(captures, "rc_pingpong.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	offs := roceOffsets(t, data)
	if len(offs) != 20 {
		t.Fatalf("found %d RoCEv2 packets", len(offs))
	}
	data[offs[0]+20] ^= 0x01 // payload byte of the first SEND
	data[offs[1]] = 0x15     // opcode of the ACK: invalid
	var out bytes.Buffer
	st, err := File(&out, bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.OK() || st.ICRCBad != 1 || st.Malformed != 1 || st.ICRCOK != 18 || st.RoCE != 20 {
		t.Errorf("stats %v", st)
	}
	if !strings.Contains(out.String(), "RC_SEND_ONLY qp=0x000011 psn=0xa43232 ackreq len=64 icrc BAD (have 0x") {
		t.Errorf("no bad-ICRC line:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "MALFORMED rxe/wire: invalid opcode: 0x15") {
		t.Errorf("no malformed line:\n%s", out.String())
	}
}

func TestFileErrorNamesOffsetOfTruncation(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(captures, "rc_pingpong.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	offs := roceOffsets(t, data)
	cut := offs[3] // inside the fourth RoCEv2 packet's block
	st, _, err := func() (Stats, string, error) {
		var out bytes.Buffer
		st, err := File(&out, bytes.NewReader(data[:cut]), Options{})
		return st, out.String(), err
	}()
	var perr *pcap.Error
	if !errors.As(err, &perr) {
		t.Fatalf("err = %v, want a *pcap.Error", err)
	}
	if !strings.Contains(err.Error(), "offset ") || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("error %q does not say where and what", err)
	}
	if st.RoCE != 3 {
		t.Errorf("counted %d RoCEv2 packets before the cut, want 3", st.RoCE)
	}
	if _, err := File(io.Discard, strings.NewReader("not a capture file"), Options{}); err == nil {
		t.Error("garbage accepted")
	}
}
