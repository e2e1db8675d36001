package perftest

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With --out json each row is one JSON object on stdout and the table's
// text goes to stderr; --plot draws the rows as a well-formed SVG with
// a point per size.
func TestJSONRowsAndPlot(t *testing.T) {
	o := Defaults(Tool{Write, false})
	o.Out, o.Plot = "json", filepath.Join(t.TempDir(), "bw.svg")
	var stdout, stderr bytes.Buffer
	out, err := newOutput(&o, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	out.bwHeader()
	for _, n := range []uint64{2, 4, 8} {
		out.bwRow(bwReport{size: n, iters: 100, peak: float64(n), avg: float64(n) / 2, msgRate: 0.5})
	}
	if err := out.plot(); err != nil {
		t.Fatal(err)
	}
	if stderr.Len() != 0 {
		t.Errorf("rows went to stderr too: %q", stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	for _, want := range []uint64{2, 4, 8} {
		var row struct {
			Test      string  `json:"test"`
			Bytes     uint64  `json:"bytes"`
			BWAverage float64 `json:"bw_average"`
		}
		if err := dec.Decode(&row); err != nil {
			t.Fatal(err)
		}
		if row.Test != "ib_write_bw" || row.Bytes != want || row.BWAverage != float64(want)/2 {
			t.Errorf("row %+v", row)
		}
	}
	svg, err := os.ReadFile(o.Plot)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg))
	circles := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "circle" {
			circles++
		}
	}
	if circles != 3 {
		t.Errorf("%d points drawn, want 3", circles)
	}
	if _, err := ParseArgs(Tool{Send, true}, []string{"--out", "yaml"}); err == nil || !strings.Contains(err.Error(), "json") {
		t.Errorf("--out yaml: %v", err)
	}
}
