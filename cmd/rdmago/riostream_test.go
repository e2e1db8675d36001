package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRiostreamCommandRefusesBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		out    string // in stdout or stderr
	}{
		{[]string{"riostream", "-T", "x"}, 1, "usage: rdmago riostream"},
		{[]string{"riostream", "-S", "0"}, 1, "-S 0: a transfer needs at least one byte"},
		{[]string{"riostream", "-C", "0"}, 1, "-C 0: a round needs at least one transfer"},
		{[]string{"riostream", "-B", "x"}, 1, `-B "x": want a number`},
		{[]string{"riostream", "-f", "gid"}, 1, "AF_IB addresses are not supported"},
	} {
		var out, errw bytes.Buffer
		if got := run(tc.args, &out, &errw); got != tc.status || !strings.Contains(out.String()+errw.String(), tc.out) {
			t.Errorf("rdmago %q: exit %d, want %d with %q; printed:\n%s%s", tc.args, got, tc.status, tc.out, out.String(), errw.String())
		}
	}
}
