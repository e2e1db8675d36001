package nvmeof_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/nvmeof"
	"github.com/rdmago/rdmago/nvmeof/wire"
	_ "github.com/rdmago/rdmago/rxe"
)

const testNQN = "nqn.2026-11.io.rdmago:test"

// serve starts a target on loopback with subsystem testNQN over the
// given storage, and returns its address.
func serve(t *testing.T, opts *nvmeof.TargetOptions, storage ...nvmeof.Storage) (*nvmeof.Target, string) {
	t.Helper()
	tg, err := nvmeof.NewTarget(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.AddSubsystem(testNQN, storage...); err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg, addr.String()
}

func dial(t *testing.T, addr string, opts *nvmeof.Options) *nvmeof.Controller {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := nvmeof.Dial(ctx, addr, testNQN, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestHostReadsBackWhatItWroteThroughTheTarget(t *testing.T) {
	file := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := nvmeof.OpenFile(file, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, addr := serve(t, nil, nvmeof.NewMemory(4<<20), f)
	c := dial(t, addr, &nvmeof.Options{IOQueues: 2, QueueDepth: 16})
	ctx := context.Background()
	ids, err := c.Namespaces(ctx)
	if err != nil || len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
		t.Fatalf("namespaces %v, %v", ids, err)
	}
	if info := c.Info(); info.SubNQN != testNQN || info.NN != 2 || info.CtrlType != wire.ControllerIO {
		t.Fatalf("identify: %+v", info)
	}
	for _, nsid := range ids {
		ns, err := c.Namespace(ctx, nsid)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(4 << 20)
		if nsid == 2 {
			want = 8 << 20
		}
		if ns.Size() != want || ns.BlockSize() != 512 {
			t.Fatalf("namespace %d: %d bytes in blocks of %d", nsid, ns.Size(), ns.BlockSize())
		}
		for _, c := range []struct{ off, n int }{
			{0, 4 << 10},      // in the capsule
			{8192, 128 << 10}, // one keyed command
			{1 << 20, 1 << 20},
			{3<<20 + 100, 1000}, // not on a block boundary
		} {
			p := make([]byte, c.n)
			for i := range p {
				p[i] = byte(i*7 + c.off + int(nsid))
			}
			if n, err := ns.WriteAt(p, int64(c.off)); err != nil || n != c.n {
				t.Fatalf("ns %d: write %d at %d: %d, %v", nsid, c.n, c.off, n, err)
			}
			got := make([]byte, c.n)
			if n, err := ns.ReadAt(got, int64(c.off)); err != nil || n != c.n {
				t.Fatalf("ns %d: read %d at %d: %d, %v", nsid, c.n, c.off, n, err)
			}
			if !bytes.Equal(got, p) {
				t.Fatalf("ns %d: %d bytes at %d read back differently", nsid, c.n, c.off)
			}
		}
		if err := ns.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// What went to the file namespace is in the file.
	disk, _ := os.ReadFile(file)
	for i := 0; i < 4<<10; i++ {
		if disk[i] != byte(i*7+2) {
			t.Fatalf("byte %d of the file is %d", i, disk[i])
		}
	}
}

func TestReadsAndWritesOutOfRangeAreRefused(t *testing.T) {
	_, addr := serve(t, nil, nvmeof.NewMemory(1<<20))
	c := dial(t, addr, nil)
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.WriteAt(make([]byte, 1024), 1<<20-512); err == nil {
		t.Error("a write past the end was taken")
	}
	p := make([]byte, 1024)
	if n, err := ns.ReadAt(p, 1<<20-512); n != 512 || err != io.EOF {
		t.Errorf("a read across the end: %d, %v; want 512, EOF", n, err)
	}
	if _, err := c.Namespace(context.Background(), 9); err == nil {
		t.Error("namespace 9 opened")
	}
}

func TestABadSubsystemNQNIsAClearError(t *testing.T) {
	_, addr := serve(t, nil, nvmeof.NewMemory(1<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := nvmeof.Dial(ctx, addr, "nqn.2026-11.io.rdmago:nobody", nil)
	var se *wire.StatusError
	if !errors.As(err, &se) || se.Status>>1&0xff != wire.SCConnectInvalidParam {
		t.Fatalf("Dial of an unknown subsystem: %v", err)
	}
}

func TestDiscoveryNamesTheSubsystems(t *testing.T) {
	tg, addr := serve(t, nil, nvmeof.NewMemory(1<<20))
	if err := tg.AddSubsystem("nqn.2026-11.io.rdmago:second", nvmeof.NewMemory(1<<20)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	entries, err := nvmeof.Discover(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].SubNQN != "nqn.2026-11.io.rdmago:second" || entries[1].SubNQN != testNQN {
		t.Fatalf("entries %+v", entries)
	}
	e := entries[1]
	if e.TrType != wire.TrTypeRDMA || e.TrAddr != "127.0.0.1" || e.AdrFam != wire.AdrFamIPv4 || e.SubType != wire.SubTypeNVMe {
		t.Fatalf("entry %+v", e)
	}
}

func TestOnlyAllowedHostsConnect(t *testing.T) {
	_, addr := serve(t, &nvmeof.TargetOptions{Hosts: []string{"nqn.2026-11.io.rdmago:host-a"}}, nvmeof.NewMemory(1<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := nvmeof.Dial(ctx, addr, testNQN, &nvmeof.Options{HostNQN: "nqn.2026-11.io.rdmago:host-b"}); err == nil {
		t.Fatal("host-b connected")
	}
	c, err := nvmeof.Dial(ctx, addr, testNQN, &nvmeof.Options{HostNQN: "nqn.2026-11.io.rdmago:host-a"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestManyConcurrentIOsLoseNothing(t *testing.T) {
	mem := nvmeof.NewMemory(16 << 20)
	_, addr := serve(t, nil, mem)
	c := dial(t, addr, &nvmeof.Options{IOQueues: 3, QueueDepth: 8})
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 20 {
				blocks := 1 + r.IntN(64)
				off := int64(g)<<19 + int64(r.IntN(1024-blocks))*512
				p := make([]byte, blocks*512)
				for i := range p {
					p[i] = byte(r.Uint32())
				}
				if _, err := ns.WriteAt(p, off); err != nil {
					errs <- err
					return
				}
				got := make([]byte, len(p))
				if _, err := ns.ReadAt(got, off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, p) {
					errs <- errors.New("read back differently")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestTargetOutlivesAHostThatGoes(t *testing.T) {
	_, addr := serve(t, nil, nvmeof.NewMemory(1<<20))
	for range 3 {
		c := dial(t, addr, &nvmeof.Options{IOQueues: 1})
		ns, err := c.Namespace(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ns.WriteAt(make([]byte, 4096), 0); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if _, err := ns.ReadAt(make([]byte, 512), 0); !errors.Is(err, nvmeof.ErrClosed) {
			t.Fatalf("a read after Close: %v", err)
		}
	}
}

func TestHostFailsWhenTheTargetCloses(t *testing.T) {
	tg, addr := serve(t, nil, nvmeof.NewMemory(1<<20))
	c := dial(t, addr, &nvmeof.Options{IOQueues: 1})
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	tg.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := ns.ReadAt(make([]byte, 512), 0)
		if errors.Is(err, nvmeof.ErrDisconnected) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reads go on after the target closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Callers whose deadlines pass while their commands are out leave the
// queue as it was: the commands' slots come back when the answers do,
// and the next caller is served. (Many short deadlines also make the
// target answer commands in quick succession on the same receives.)
func TestCallersDeadlinesLeaveTheQueueUsable(t *testing.T) {
	_, addr := serve(t, nil, nvmeof.NewMemory(4<<20))
	c := dial(t, addr, &nvmeof.Options{IOQueues: 1})
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				for ctx.Err() == nil {
					if _, err := ns.ReadAtContext(ctx, buf, 0); err != nil && ctx.Err() == nil {
						t.Errorf("round %d: %v", round, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		cancel()
		if _, err := ns.ReadAt(make([]byte, 512), 0); err != nil {
			t.Fatalf("round %d, after the deadline: %v", round, err)
		}
	}
}
