package perftest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// cG formats x as C's "%g" does (strconv's 'g' with six digits is the
// same: significant digits, no trailing zeros, a two-digit exponent
// outside 1e-4 … 1e6).
func cG(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }

// output is where a run's results go: perftest's table, or with
// --out json one JSON object per size on standard output (the table's
// banner then goes to standard error); and with --plot, an SVG chart
// of the rows.
type output struct {
	o      *Options
	table  io.Writer
	json   *json.Encoder
	points []point
}

// point is one row, for the chart.
type point struct {
	size int
	y    float64 // average bandwidth, or typical latency
}

func newOutput(o *Options, stdout, stderr io.Writer) (*output, error) {
	out := &output{o: o, table: stdout}
	switch o.Out {
	case "", "text":
	case "json":
		out.table, out.json = stderr, json.NewEncoder(stdout)
	default:
		return nil, fmt.Errorf("--out %q: want text or json", o.Out)
	}
	return out, nil
}

func (out *output) bwHeader() {
	if out.json == nil {
		printBWHeader(out.table, out.o)
	}
}

func (out *output) latHeader() {
	if out.json != nil {
		return
	}
	if out.o.Duration > 0 {
		fmt.Fprint(out.table, " #bytes        #iterations       t_avg[usec]    tps average\n")
		return
	}
	printLatHeader(out.table)
}

// latDurRow is a -D latency row: count round trips (or reads) in window,
// the average time of one (halved for sends and writes, factor 2) and
// how many went by a second.
func (out *output) latDurRow(size, count int, window time.Duration, factor float64) {
	var avg, tps float64
	if count > 0 && window > 0 {
		avg = float64(window.Nanoseconds()) / 1e3 / factor / float64(count)
		tps = float64(count) / window.Seconds()
	}
	out.points = append(out.points, point{size, avg})
	if out.json == nil {
		fmt.Fprintf(out.table, " %-7d       %d            %-7.2f        %-7.2f\n", size, count, avg, tps)
		return
	}
	out.json.Encode(struct {
		Test       string  `json:"test"`
		Bytes      int     `json:"bytes"`
		Iterations int     `json:"iterations"`
		Avg        float64 `json:"t_avg_usec"`
		TPS        float64 `json:"tps_average"`
	}{out.o.Tool.Name(), size, count, avg, tps})
}

// bwRow is one bandwidth row.
func (out *output) bwRow(r bwReport) {
	out.points = append(out.points, point{int(r.size), r.avg})
	if out.json == nil {
		printBWRow(out.table, out.o, r)
		return
	}
	unit := "MB/sec"
	if out.o.ReportGbits {
		unit = "Gb/sec"
	}
	out.json.Encode(struct {
		Test       string  `json:"test"`
		Bytes      uint64  `json:"bytes"`
		Iterations uint64  `json:"iterations"`
		Unit       string  `json:"unit"`
		BWPeak     float64 `json:"bw_peak"`
		BWAverage  float64 `json:"bw_average"`
		MsgRate    float64 `json:"msg_rate_mpps"`
	}{out.o.Tool.Name(), r.size, r.iters, unit, r.peak, r.avg, r.msgRate})
}

// latRow is one latency row, from the times of successive iterations
// (see latStats); with -U every delta is listed first, as measured.
func (out *output) latRow(size, iters int, stamps []stamp, factor float64) {
	d := latDeltas(stamps, factor)
	if out.o.Unsorted && out.json == nil {
		fmt.Fprintf(out.table, "#, usec\n")
		for i, x := range d {
			fmt.Fprintf(out.table, "%d, %s\n", i+1, cG(x))
		}
		fmt.Fprint(out.table, resultLine)
		printLatHeader(out.table)
	}
	l := latStatsOf(d)
	out.points = append(out.points, point{size, l.typical})
	if out.json == nil {
		printLatRow(out.table, size, iters, l)
		return
	}
	out.json.Encode(struct {
		Test       string  `json:"test"`
		Bytes      int     `json:"bytes"`
		Iterations int     `json:"iterations"`
		Min        float64 `json:"t_min_usec"`
		Max        float64 `json:"t_max_usec"`
		Typical    float64 `json:"t_typical_usec"`
		Avg        float64 `json:"t_avg_usec"`
		Stdev      float64 `json:"t_stdev_usec"`
		P99        float64 `json:"p99_usec"`
		P999       float64 `json:"p99_9_usec"`
	}{out.o.Tool.Name(), size, iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999})
}

// checkPlot checks that the chart --plot asks for can be written, before
// the run rather than after it: an existing file must open for writing,
// and a new one be creatable (it is made and removed again).
func checkPlot(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		f.Close()
		return os.Remove(path)
	}
	if errors.Is(err, fs.ErrExist) {
		if f, err = os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			return f.Close()
		}
	}
	return fmt.Errorf("--plot: %w", err)
}

// plot writes the chart --plot asked for, if any.
func (out *output) plot() error {
	if out.o.Plot == "" || len(out.points) == 0 {
		return nil
	}
	what, unit := "BW average", "MB/sec"
	if out.o.ReportGbits {
		unit = "Gb/sec"
	}
	if out.o.Tool.Lat {
		what, unit = "t_typical", "usec"
	}
	svg := chart(out.o.Tool.Name(), what+" ["+unit+"]", out.points)
	if err := os.WriteFile(out.o.Plot, []byte(svg), 0o644); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

// chart draws ys against sizes on a log₂ axis, as an SVG document.
func chart(title, ylabel string, pts []point) string {
	const w, h, left, right, top, bottom = 720.0, 420.0, 80.0, 20.0, 40.0, 60.0
	minX, maxX := math.Log2(float64(max(pts[0].size, 1))), math.Log2(float64(max(pts[0].size, 1)))
	maxY := 0.0
	for _, p := range pts {
		x := math.Log2(float64(max(p.size, 1)))
		minX, maxX = math.Min(minX, x), math.Max(maxX, x)
		maxY = math.Max(maxY, p.y)
	}
	if maxX == minX {
		maxX = minX + 1
	}
	if maxY <= 0 {
		maxY = 1
	}
	maxY = niceCeil(maxY)
	px := func(size int) float64 {
		return left + (math.Log2(float64(max(size, 1)))-minX)/(maxX-minX)*(w-left-right)
	}
	py := func(y float64) float64 { return h - bottom - y/maxY*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%g" y="24" text-anchor="middle" font-size="15">%s</text>`+"\n", w/2, title)
	// Axes, grid and labels.
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, h-bottom, w-right, h-bottom)
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, top, left, h-bottom)
	for i := 0; i <= 5; i++ {
		y := maxY * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", left, py(y), w-right, py(y))
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, py(y)+4, trimFloat(y))
	}
	step := max(1, int(math.Ceil((maxX-minX)/12)))
	for e := int(minX); e <= int(maxX); e += step {
		x := left + (float64(e)-minX)/(maxX-minX)*(w-left-right)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x, h-bottom+16, sizeLabel(1<<e))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">message size [bytes]</text>`+"\n", (left+w-right)/2, h-16)
	fmt.Fprintf(&b, `<text x="16" y="%g" text-anchor="middle" transform="rotate(-90 16 %g)">%s</text>`+"\n", (top+h-bottom)/2, (top+h-bottom)/2, ylabel)
	// The curve.
	b.WriteString(`<polyline fill="none" stroke="#1f6fb4" stroke-width="2" points="`)
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", px(p.size), py(p.y))
	}
	b.WriteString("\"/>\n")
	for _, p := range pts {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#1f6fb4"><title>%d bytes: %s</title></circle>`+"\n", px(p.size), py(p.y), p.size, trimFloat(p.y))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// sizeLabel prints a size as 2, 1K, 4M.
func sizeLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}
