package nvmeoftool

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/memnet"
)

// run runs `rdmago nvmeof args...` in this process with stdin.
func run(t *testing.T, ctx context.Context, stdin []byte, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &common{stdin: bytes.NewReader(stdin)}
	status := mainWith(ctx, c, args, &stdout, &stderr)
	return status, stdout.String(), stderr.String()
}

func TestServeThenWriteReadIdentifyDiscoverBench(t *testing.T) {
	memnet.NoLeaks(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	const nqn = "nqn.2026-11.io.rdmago:tool"
	ctx, stop := context.WithCancel(context.Background())
	out := &memnet.Buffer{}
	served := make(chan int)
	go func() {
		var errb bytes.Buffer
		served <- mainWith(ctx, &common{}, []string{"serve", "-a", "127.0.0.1", "-s", "14420", "-n", nqn, "-f", img, "-m", "1m", "-quiet"}, out, &errb)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "serving") {
		if time.Now().After(deadline) {
			t.Fatalf("serve: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	addr := []string{"-a", "127.0.0.1", "-s", "14420", "-n", nqn}
	data := bytes.Repeat([]byte("nvme over rdma "), 10000) // not a whole number of blocks
	if st, _, errs := run(t, context.Background(), data, append([]string{"write", "-o", "1000"}, addr...)...); st != 0 {
		t.Fatalf("write: %d %s", st, errs)
	}
	st, got, errs := run(t, context.Background(), nil, append([]string{"read", "-o", "1000", "-l", "150000"}, addr...)...)
	if st != 0 || got != string(data) {
		t.Fatalf("read: %d %s; %d bytes, same %v", st, errs, len(got), got == string(data))
	}
	disk, _ := os.ReadFile(img)
	if !bytes.Equal(disk[1000:151000], data) {
		t.Fatal("the file does not hold what was written")
	}
	st, id, errs := run(t, context.Background(), nil, append([]string{"identify"}, addr...)...)
	if st != 0 || !strings.Contains(id, "namespace 1: 4194304 bytes") || !strings.Contains(id, "namespace 2: 1048576 bytes") {
		t.Fatalf("identify: %d %s\n%s", st, errs, id)
	}
	st, disc, errs := run(t, context.Background(), nil, "discover", "-a", "127.0.0.1", "-s", "14420")
	if st != 0 || !strings.Contains(disc, "subnqn="+nqn+" trtype=rdma adrfam=ipv4 traddr=127.0.0.1 trsvcid=14420 subtype=nvme") {
		t.Fatalf("discover: %d %s\n%s", st, errs, disc)
	}
	st, b, errs := run(t, context.Background(), nil, append([]string{"bench", "-rw", "randread", "-t", "200ms", "-qd", "4"}, addr...)...)
	if st != 0 || !strings.Contains(b, "IOPS") {
		t.Fatalf("bench: %d %s\n%s", st, errs, b)
	}
	st, _, errs = run(t, context.Background(), nil, append([]string{"read", "-o", "4194000", "-l", "1000"}, addr...)...)
	if st == 0 || !strings.Contains(errs, "namespace 1 holds 4194304 bytes") {
		t.Fatalf("a read past the end: %d %s", st, errs)
	}
	stop()
	if st := <-served; st != 0 {
		t.Fatalf("serve ended with %d", st)
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nosuch"},
		{"read", "-a", "127.0.0.1"},
		{"read", "-n", "x"},
		{"read", "-a", "127.0.0.1", "-n", "x", "-l", "0"},
		{"read", "-a", "127.0.0.1", "-n", "x", "-s", "70000", "-l", "1"},
		{"read", "-a", "127.0.0.1", "-n", "x", "-N", "0", "-l", "1"},
		{"bench", "-a", "127.0.0.1", "-n", "x", "-bs", "lots"},
		{"bench", "-a", "127.0.0.1", "-n", "x", "-rw", "sideways"},
		{"serve", "-a", "127.0.0.1", "-n", "x"},
		{"serve", "-a", "127.0.0.1", "-n", "x", "-m", "1m", "-B", "1000"},
		{"discover", "-a", "127.0.0.1", "extra"},
	} {
		st, _, errs := run(t, context.Background(), nil, args...)
		if st != 2 || errs == "" {
			t.Errorf("rdmago nvmeof %q: status %d, %q; want 2 and a message", args, st, errs)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512": 512, "4k": 4096, "4K": 4096, "128kib": 128 << 10, "1m": 1 << 20, "2G": 2 << 30, "1mb": 1 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "-1", "1x", "99999999999t"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) took it", in)
		}
	}
}

func TestBenchTimeTakesSecondsOrADuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "1.5": 1500 * time.Millisecond, "500ms": 500 * time.Millisecond, "1m": time.Minute, "0": 0} {
		var s seconds
		if err := s.Set(in); err != nil || time.Duration(s) != want {
			t.Errorf("-t %s = %v, %v; want %v", in, time.Duration(s), err, want)
		}
	}
	for _, in := range []string{"", "five", "5x", "NaN", "Inf", "1e30"} {
		var s seconds
		if err := s.Set(in); err == nil {
			t.Errorf("-t %q took it: %v", in, time.Duration(s))
		}
	}
}
