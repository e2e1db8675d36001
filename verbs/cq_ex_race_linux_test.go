package verbs_test

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// wireDevice is a provider whose completions report memory its device
// wrote from a goroutine of its own, which tells the CQ's side through a
// pipe read and written with bare system calls: a path the race detector
// does not see, as it does not see a packet through a UDP socket.
type wireDevice struct{ mem []byte }

type wireContext struct {
	cqContext
	mem []byte
}

func (d wireDevice) Open(verbs.EventSink) (verbs.ContextDriver, error) {
	return wireContext{mem: d.mem}, nil
}

func (c wireContext) CreateCQ(cqe int, notify func()) (verbs.CQDriver, error) {
	return &wireCQ{CQ: swcq.New(cqe, notify), mem: c.mem}, nil
}

// wireCQ has a completion arrive each time it is polled: the device
// writes mem[0], calls racesync.Sync as a software device does after
// writing registered memory, and says so through the pipe; the CQ then
// queues the completion.
type wireCQ struct {
	*swcq.CQ
	mem  []byte
	sent byte
}

func (c *wireCQ) arrive(t byte) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		panic(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	go func() {
		c.mem[0] = t
		racesync.Sync()
		var b [1]byte
		syscall.Syscall(syscall.SYS_WRITE, uintptr(p[1]), uintptr(unsafe.Pointer(&b[0])), 1)
	}()
	var b [1]byte
	if _, _, errno := syscall.Syscall(syscall.SYS_READ, uintptr(p[0]), uintptr(unsafe.Pointer(&b[0])), 1); errno != 0 {
		panic(errno)
	}
	c.Push(&verbs.WC{WRID: uint64(t)}, false)
}

func (c *wireCQ) StartPoll(cur *verbs.WCEx) error {
	c.sent++
	c.arrive(c.sent)
	return c.CQ.StartPoll(cur)
}

func (c *wireCQ) NextPoll(cur *verbs.WCEx) error {
	c.sent++
	c.arrive(c.sent)
	return c.CQ.NextPoll(cur)
}

// A program may read what the device wrote once StartPoll or NextPoll
// hands it the completion, as after Poll: the race detector sees the
// device's write ordered before the read (racesync), whichever call of a
// batch brought the completion.
func TestCQExPollOrdersTheDevicesWritesBeforeTheProgramsReads(t *testing.T) {
	if !racesync.Enabled {
		t.Skip("only the race detector can tell; run with -race")
	}
	for _, c := range []struct {
		name string
		next int // NextPoll calls after StartPoll
	}{{"StartPoll", 0}, {"NextPoll", 2}} {
		t.Run(c.name, func(t *testing.T) {
			mem := make([]byte, 8)
			cq, err := openContext(t, wireDevice{mem: mem}).CreateCQEx(&verbs.CQInitAttrEx{CQE: 8, WCFlags: verbs.WCStandardFlags})
			if err != nil {
				t.Fatal(err)
			}
			defer cq.Destroy()
			if err := cq.StartPoll(nil); err != nil {
				t.Fatal(err)
			}
			if mem[0] != byte(cq.WRID) {
				t.Fatalf("completion %d, memory says %d", cq.WRID, mem[0])
			}
			for range c.next {
				if err := cq.NextPoll(); err != nil {
					t.Fatal(err)
				}
				if mem[0] != byte(cq.WRID) {
					t.Fatalf("completion %d, memory says %d", cq.WRID, mem[0])
				}
			}
			cq.EndPoll()
		})
	}
}
