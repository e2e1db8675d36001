// Command blkbench reads a block device with O_DIRECT from several
// goroutines at once, as fio's psync engine does with numjobs, and prints
// the figures in the form of `rdmago nvmeof bench`, so that a kernel
// NVMe/RDMA host's namespace (/dev/nvme0n1) is measured the way rdmago's
// host is. Usage: blkbench [-rw randread|read] [-bs 4096] [-qd 32] [-t 5s] DEVICE
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	rw := flag.String("rw", "randread", "randread or read (sequential)")
	bs := flag.Int("bs", 4096, "the size of each read")
	qd := flag.Int("qd", 32, "reads in flight (goroutines)")
	dur := flag.Duration("t", 5*time.Second, "how long to run")
	flag.Parse()
	if flag.NArg() != 1 || *bs <= 0 || *bs%512 != 0 || *qd <= 0 || (*rw != "randread" && *rw != "read") {
		fmt.Fprintln(os.Stderr, "usage: blkbench [-rw randread|read] [-bs 4096] [-qd 32] [-t 5s] DEVICE")
		os.Exit(2)
	}
	f, err := os.OpenFile(flag.Arg(0), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	size, err := f.Seek(0, 2)
	if err != nil || size < int64(*bs) {
		fmt.Fprintln(os.Stderr, "blkbench: device too small or unseekable:", err)
		os.Exit(1)
	}
	slots := size / int64(*bs)
	var ios, seq atomic.Int64
	var failed atomic.Value
	stop := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range *qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			raw := make([]byte, *bs+4096)
			off := int(4096 - uintptr(unsafe.Pointer(&raw[0]))%4096)
			buf := raw[off : off+*bs] // O_DIRECT wants aligned memory
			for time.Now().Before(stop) {
				slot := seq.Add(1) % slots
				if *rw == "randread" {
					slot = r.Int64N(slots)
				}
				if _, err := f.ReadAt(buf, slot*int64(*bs)); err != nil {
					failed.Store(err)
					return
				}
				ios.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		fmt.Fprintln(os.Stderr, "blkbench:", err)
		os.Exit(1)
	}
	el := time.Since(start).Seconds()
	n := ios.Load()
	fmt.Printf("%s bs=%d qd=%d: %d I/Os in %.2fs, %.0f IOPS, %.1f MB/s, %.1f us average\n",
		*rw, *bs, *qd, n, el, float64(n)/el, float64(n)*float64(*bs)/el/1e6, el*1e6*float64(*qd)/float64(max(n, 1)))
}
