// Package rsperf is what rdma-core's rstream and riostream both carry:
// the table of sizes their default run goes through (test_size,
// size_to_count) and the result row they print (show_perf). Packages
// rstream and riostream use it, as the two C programs each hold a copy.
package rsperf

import (
	"fmt"
	"io"

	"github.com/rdmago/rdmago/internal/units"
)

// Sizes is test_size: the sizes of the default run, the ones marked All
// only with -S all.
var Sizes = []struct {
	Bytes int
	All   bool
}{
	{1 << 6, false},
	{1 << 7, true}, {1<<7 + 1<<6, true},
	{1 << 8, true}, {1<<8 + 1<<7, true},
	{1 << 9, true}, {1<<9 + 1<<8, true},
	{1 << 10, true}, {1<<10 + 1<<9, true},
	{1 << 11, true}, {1<<11 + 1<<10, true},
	{1 << 12, false}, {1<<12 + 1<<11, true},
	{1 << 13, true}, {1<<13 + 1<<12, true},
	{1 << 14, true}, {1<<14 + 1<<13, true},
	{1 << 15, true}, {1<<15 + 1<<14, true},
	{1 << 16, false}, {1<<16 + 1<<15, true},
	{1 << 17, true}, {1<<17 + 1<<16, true},
	{1 << 18, true}, {1<<18 + 1<<17, true},
	{1 << 19, true}, {1<<19 + 1<<18, true},
	{1 << 20, false}, {1<<20 + 1<<19, true},
	{1 << 21, true}, {1<<21 + 1<<20, true},
	{1 << 22, true}, {1<<22 + 1<<21, true},
}

// MaxSize is the largest size of the table.
func MaxSize() int { return Sizes[len(Sizes)-1].Bytes }

// SizeToCount is size_to_count: fewer transfers for larger sizes.
func SizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// Test is one row of the table: Iter rounds of Count transfers of Size
// bytes each way.
type Test struct {
	Name              string
	Size, Count, Iter int
}

// Latency is the latency test of a size: one transfer a round.
func Latency(size int) Test {
	return Test{Name: units.Size(int64(size)) + "_lat", Size: size, Count: 1, Iter: SizeToCount(size)}
}

// Bandwidth is the bandwidth test of a size: one round of many.
func Bandwidth(size int) Test {
	return Test{Name: units.Size(int64(size)) + "_bw", Size: size, Count: SizeToCount(size), Iter: 1}
}

// Heading prints the table's heading.
func Heading(w io.Writer) {
	fmt.Fprintf(w, "%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
}

// Row prints t's row for a run that took usec microseconds (show_perf).
func Row(w io.Writer, t Test, usec float64) {
	bytes := int64(t.Iter) * int64(t.Count) * int64(t.Size) * 2
	gbps, perXfer := 0.0, 0.0
	if usec > 0 {
		gbps = float64(bytes*8) / (1000 * usec)
		perXfer = usec / float64(t.Iter) / float64(t.Count*2)
	}
	fmt.Fprintf(w, "%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n",
		t.Name, units.Size(int64(t.Size)), units.Count(int64(t.Count)), units.Count(int64(t.Iter)), units.Size(bytes),
		usec/1e6, gbps, perXfer)
}
