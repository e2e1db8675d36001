package sockets_test

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/fabrictest"
)

// cTarget builds and starts testdata/atomic_target.c, a program on C's
// sockets provider, and returns its endpoint's name and its region's key,
// and a function that ends it and returns the region's first words. It
// skips the test where there is no C compiler or libfabric-dev.
func cTarget(t *testing.T) (name []byte, key uint64, finish func() []uint64) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if _, herr := os.Stat("/usr/include/rdma/fi_atomic.h"); err != nil || herr != nil {
		t.Skip("no C compiler or libfabric-dev (apt-get install gcc libfabric-dev)")
	}
	bin := filepath.Join(t.TempDir(), "atomic_target")
	if out, err := exec.Command(cc, "-o", bin, "testdata/atomic_target.c", "-lfabric").CombinedOutput(); err != nil {
		t.Fatalf("building the C target: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewScanner(stdout)
	if !r.Scan() {
		t.Fatalf("the C target printed nothing: %s", stderr.String())
	}
	f := strings.Fields(r.Text())
	if len(f) != 2 {
		t.Fatalf("the C target printed %q", r.Text())
	}
	name, err = hex.DecodeString(f[0])
	fabrictest.Must(t, err)
	key, err = strconv.ParseUint(f[1], 10, 64)
	fabrictest.Must(t, err)
	return name, key, func() []uint64 {
		stdin.Close()
		var words []uint64
		for r.Scan() {
			v, err := strconv.ParseUint(r.Text(), 10, 64)
			fabrictest.Must(t, err)
			words = append(words, v)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("the C target: %v: %s", err, stderr.String())
		}
		return words
	}
}

// TestAtomicsAgainstCsSocketsProvider: atomics and an RMA read from a Go
// RDM endpoint to a region of a C program on libfabric's sockets
// provider, which applies them with its own code: the fetched values and
// the region the C side reports at the end are what each operation
// defines. The region starts as 0, 10, 20, ... in 64-bit words.
func TestAtomicsAgainstCsSocketsProvider(t *testing.T) {
	name, key, finish := cTarget(t)
	e := openEnd(t, fabric.EPRDM)
	peer, err := e.AV.InsertName(fabric.FormatSockaddrIn, name)
	fabrictest.Must(t, err)
	le := binary.LittleEndian
	u64 := func(v uint64) []byte { return le.AppendUint64(nil, v) }
	res := make([]byte, 8)
	check := func(what string, want uint64) {
		t.Helper()
		if c := fabrictest.Completion(t, e.CQ); c.Context != what {
			t.Fatalf("%s: completion %+v", what, c)
		}
		if want != ^uint64(0) && le.Uint64(res) != want {
			t.Fatalf("%s fetched %d, want %d", what, le.Uint64(res), want)
		}
	}
	fabrictest.Must(t, e.EP.FetchAtomic(u64(5), nil, res, nil, peer, 8, key, fabric.Uint64, fabric.OpSum, "sum"))
	check("sum", 10)
	fabrictest.Must(t, e.EP.CompareAtomic(u64(200), nil, u64(20), nil, res, nil, peer, 16, key, fabric.Uint64, fabric.OpCSwap, "cswap"))
	check("cswap", 20)
	fabrictest.Must(t, e.EP.Atomic(le.AppendUint32(nil, 99), nil, peer, 24, key, fabric.Int32, fabric.OpMax, "max"))
	check("max", ^uint64(0))
	fabrictest.Must(t, e.EP.FetchAtomic(nil, nil, res, nil, peer, 32, key, fabric.Uint64, fabric.OpAtomicRead, "read"))
	check("read", 40)
	fabrictest.Must(t, e.EP.Write(u64(777), nil, peer, 40, key, "write"))
	check("write", ^uint64(0))
	got := make([]byte, 16)
	fabrictest.Must(t, e.EP.Read(got, nil, peer, 8, key, "rma read"))
	check("rma read", ^uint64(0))
	if le.Uint64(got) != 15 || le.Uint64(got[8:]) != 200 {
		t.Fatalf("read back %d, %d; want 15, 200", le.Uint64(got), le.Uint64(got[8:]))
	}
	words := finish()
	want := []uint64{0, 15, 200, 99, 40, 777, 60, 70}
	if len(words) != len(want) {
		t.Fatalf("the C target reports %v", words)
	}
	for i := range want {
		if words[i] != want[i] {
			t.Fatalf("the C target's region is %v, want %v", words, want)
		}
	}
}
