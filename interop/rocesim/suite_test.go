package rocesim

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// caseLine is run.sh's line for one case.
var caseLine = regexp.MustCompile(`^(PASS|FAIL) (\S+)(?: \((.*)\))?$`)

// summaryLine is run.sh's last line.
var summaryLine = regexp.MustCompile(`^(\d+) passed, (\d+) failed$`)

// TestRoceSimCases runs every case of the roce-sim work tree ROCESIM_DIR
// names through run.sh (as root: it makes network namespaces), one subtest
// per case. It takes minutes: give go test a -timeout of 30m or so.
func TestRoceSimCases(t *testing.T) {
	dir := os.Getenv("ROCESIM_DIR")
	if dir == "" {
		t.Skip("skipped: ROCESIM_DIR is not set; set it to a roce-sim work tree (a clone of github.com/datenlord/roce-sim) to run its cases against rdmago")
	}
	if os.Geteuid() != 0 {
		t.Fatal("ROCESIM_DIR is set but run.sh needs root, for network namespaces")
	}
	var out bytes.Buffer
	cmd := exec.Command("./run.sh", dir)
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	t.Logf("run.sh:\n%s", out.String())

	passed, failed, total := 0, 0, -1
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := caseLine.FindStringSubmatch(line); m != nil {
			t.Run(m[2], func(t *testing.T) {
				if m[1] == "FAIL" {
					t.Error(m[3])
				}
			})
			if m[1] == "PASS" {
				passed++
			} else {
				failed++
			}
		} else if m := summaryLine.FindStringSubmatch(line); m != nil {
			p, _ := strconv.Atoi(m[1])
			f, _ := strconv.Atoi(m[2])
			if p != passed || f != failed {
				t.Errorf("summary says %d passed, %d failed; the case lines %d and %d", p, f, passed, failed)
			}
			total = p + f
		}
	}
	switch {
	case total < 0:
		t.Fatalf("run.sh printed no summary line (%v)", err)
	case total == 0:
		t.Fatal("run.sh ran no case")
	case (err == nil) != (failed == 0):
		t.Errorf("run.sh exit status %v with %d failed cases", err, failed)
	}
}
