package perftest

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

var resultLine = strings.Repeat("-", 87) + "\n"

// cHex formats v as C's "%#0*x" does: zero-padded to width, with "0x"
// counted in the width, and no "0x" for zero.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// printBanner prints the test's description, as ctx_print_test_info.
func printBanner(w io.Writer, o *Options, r *res) {
	t := o.Tool
	kind := "BW "
	if o.PostList > 1 {
		kind = "Post List BW "
	}
	if o.Duplex {
		kind = "Bidirectional " + kind
	}
	if t.Lat {
		kind = "Latency "
	}
	fmt.Fprint(w, resultLine)
	name := verbNames[t.Verb]
	if t.Verb == Atomic {
		name += " " + atomicNames[o.AtomicType]
	}
	fmt.Fprintf(w, "                    %s %sTest\n", name, kind)
	if o.Events {
		fmt.Fprintf(w, " Test with events. Using %s_comp0\n", o.Device)
	}
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", o.Device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", o.NumQPs)
	fmt.Fprintf(w, " Connection type : %s\t\tUsing SRQ      : OFF\n", o.Conn)
	fmt.Fprintf(w, " PCIe relax order: Unsupported\n")
	fmt.Fprintf(w, " ibv_wr* API     : OFF\n")
	if o.Server != "" || o.Duplex {
		fmt.Fprintf(w, " TX depth        : %d\n", o.TxDepth)
	}
	if o.PostList > 1 {
		fmt.Fprintf(w, " Post List       : %d\n", o.PostList)
	}
	if t.Verb == Send && (o.Server == "" || o.Duplex) {
		fmt.Fprintf(w, " RX depth        : %d\n", o.RxDepth)
	}
	if !t.Lat {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", o.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", r.mtu.Bytes())
	link := "IB"
	if r.port.LinkLayer == verbs.LinkLayerEthernet {
		link = "Ethernet"
	}
	fmt.Fprintf(w, " Link type       : %s\n", link)
	fmt.Fprintf(w, " GID index       : %d\n", o.GIDIndex)
	if t.Verb == Send || t.Verb == Write {
		fmt.Fprintf(w, " Max inline data : %d[B]\n", o.Inline)
	} else {
		fmt.Fprintf(w, " Outstand reads  : %d\n", o.OutReads)
	}
	fmt.Fprintf(w, " rdma_cm QPs\t : %s\n", onOff(o.RdmaCM))
	method := "Ethernet"
	if o.CMComm {
		method = "rdma_cm"
	}
	fmt.Fprintf(w, " Data ex. method : %s", method)
	if o.RdmaCM && o.Server == "" {
		fmt.Fprintf(w, "\n%s Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP", resultLine)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, resultLine)
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

// printAddrs prints the local address lines, then the remote ones.
func printAddrs(w io.Writer, o *Options, my, rem []dest) {
	type line struct {
		name string
		d    *dest
	}
	var lines []line
	for i := range my {
		lines = append(lines, line{"local", &my[i]})
	}
	for i := range rem {
		lines = append(lines, line{"remote", &rem[i]})
	}
	for _, x := range lines {
		d := x.d
		fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", x.name, cHex(uint64(d.lid), 4), cHex(uint64(d.qpn), 6), cHex(uint64(d.psn), 6))
		// As perftest: reads show their outstanding reads and RDMA
		// operations their memory; atomics show neither.
		if o.Tool.Verb == Read {
			fmt.Fprintf(w, " OUT %s", cHex(uint64(d.outReads), 4))
		}
		if o.Tool.Verb == Read || o.Tool.Verb == Write {
			fmt.Fprintf(w, " RKey %s VAddr %s", cHex(uint64(d.rkey), 8), cHex(d.vaddr, 16))
		}
		fmt.Fprint(w, "\n GID: ")
		for i, b := range d.gid {
			if i > 0 {
				fmt.Fprint(w, ":")
			}
			fmt.Fprintf(w, "%02d", b)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, resultLine)
}

func printBWHeader(w io.Writer, o *Options) {
	unit := "MB/sec"
	if o.ReportGbits {
		unit = "Gb/sec"
	}
	fmt.Fprintf(w, " #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n", unit, unit)
}

func printBWRow(w io.Writer, o *Options, r bwReport) {
	if o.ReportGbits && r.avg < 0.1 {
		// perftest's extended row, for small Gb/sec figures.
		fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.size, r.iters, r.peak, r.avg, r.msgRate)
		return
	}
	fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.size, r.iters, r.peak, r.avg, r.msgRate)
}

func printLatHeader(w io.Writer) {
	fmt.Fprint(w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n")
}

// latency is one latency row's figures, in µs.
type latency struct {
	min, max, typical, avg, stdev, p99, p999 float64
}

func printLatRow(w io.Writer, size, iters int, l latency) {
	fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		size, iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999)
}

// stamp is a time perftest records per operation: nanoseconds on the
// monotonic clock since stampBase. Not a time.Time, which holds a pointer
// (its Location): the collector would scan arrays of a million of them
// while the test runs, and its work would show in the figures.
type stamp int64

var stampBase = time.Now()

// newStamps returns room for n stamps, its memory already touched. A large
// slice comes from the system untouched, and the run that fills it would
// otherwise take a page fault every 512 stamps: on a virtual machine whose
// faults cost tens of microseconds, a few percent of a 0.2 s run timed as
// the device's.
func newStamps(n int) []stamp {
	s := make([]stamp, n)
	perPage := os.Getpagesize() / int(unsafe.Sizeof(stamp(0)))
	for i := 0; i < n; i += perPage {
		s[i] = 0
	}
	if n > 0 {
		s[n-1] = 0 // the last page, when s does not start on a page
	}
	return s
}

// stampNow returns the stamp of the present.
func stampNow() stamp { return stamp(time.Since(stampBase)) }

// Sub returns the duration s-t.
func (s stamp) Sub(t stamp) time.Duration { return time.Duration(s - t) }

// bwReportOf computes a bandwidth row as perftest does: the average over
// the whole run (first post to last completion), the peak as the best
// rate over any run of consecutive operations ending at a signaled one.
func bwReportOf(o *Options, size int, posted, completed []stamp) bwReport {
	n := len(posted)
	unit := float64(1 << 20)
	if o.ReportGbits {
		unit = 125e6
	}
	total := completed[n-1].Sub(posted[0]).Seconds()
	rep := bwReport{size: uint64(size), iters: uint64(n)}
	if total > 0 {
		rep.avg = float64(size) * float64(n) / total / unit
		rep.msgRate = float64(n) / total / 1e6
	}
	if o.NoPeak {
		return rep
	}
	best := completed[n-1].Sub(posted[0]) / time.Duration(n)
	cqMod := max(o.CQMod, 1)
	for i := 0; i < n; i += max(o.PostList, 1) {
		for j := (i+1+cqMod-1)/cqMod*cqMod - 1; j < n; j += cqMod {
			if t := completed[j].Sub(posted[i]) / time.Duration(j-i+1); t < best {
				best = t
			}
		}
		if n%cqMod != 0 {
			j := n - 1
			if t := completed[j].Sub(posted[i]) / time.Duration(j-i+1); t < best {
				best = t
			}
		}
	}
	if best > 0 {
		rep.peak = float64(size) / best.Seconds() / unit
	}
	return rep
}

// latStats computes a latency row from the times of successive
// iterations, as perftest does: the deltas between them, sorted, less
// the two largest; the typical figure is the median; send latencies are
// half a round trip (factor 2), read latencies a whole one (1).
func latStats(stamps []stamp, factor float64) latency {
	return latStatsOf(latDeltas(stamps, factor))
}

// latDeltas are the times between successive stamps, in µs, divided by
// factor, in the order measured.
func latDeltas(stamps []stamp, factor float64) []float64 {
	d := make([]float64, len(stamps)-1)
	for i := range d {
		d[i] = float64(stamps[i+1].Sub(stamps[i]).Nanoseconds()) / 1e3 / factor
	}
	return d
}

// latStatsOf is latStats from the deltas, which it sorts.
func latStatsOf(d []float64) latency {
	n := len(d)
	sort.Float64s(d)
	cnt := n - 2 // the tail perftest leaves out
	if cnt < 1 {
		cnt = 1
	}
	var l latency
	l.min, l.max = d[0], d[min(cnt, n-1)]
	if (cnt-1)%2 != 0 {
		l.typical = (d[cnt/2] + d[cnt/2-1]) / 2
	} else {
		l.typical = d[cnt/2]
	}
	sum := 0.0
	for _, x := range d[:cnt] {
		sum += x
	}
	l.avg = sum / float64(cnt)
	// The standard deviation as perftest computes it: each deviation, and
	// its square, truncated to a whole number of microseconds.
	v := 0.0
	for _, x := range d[:cnt] {
		dev := int(l.avg - x)
		v += float64(dev * dev)
	}
	l.stdev = math.Sqrt(v / float64(cnt))
	l.p99 = d[min(int(math.Ceil(float64(cnt)*0.99)), n-1)]
	l.p999 = d[min(int(math.Ceil(float64(cnt)*0.999)), n-1)]
	return l
}
