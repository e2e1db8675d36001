package main

import (
	"strings"
	"testing"
)

// A perftest tool given an odd value fails at once with exit status 1 and
// one line saying what is wrong, then where the options are listed.
func TestPerftestCommandsRefuseOddValuesInOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"ib_send_bw", "-s", "x"}, `ib_send_bw: -s "x": want a number from 1 to 8388608`},
		{[]string{"ib_send_bw", "-s", "0"}, `-s "0": want a number from 1`},
		{[]string{"ib_write_bw", "-s", "2147483648"}, `-s "2147483648": want a number`},
		{[]string{"ib_write_bw", "-s", "9223372036854775808"}, `-s "9223372036854775808": want a number`},
		{[]string{"ib_read_lat", "-n", "-1"}, `-n "-1": want a number from 5`},
		{[]string{"ib_send_bw", "-q", "1025"}, `-q "1025": want a number from 1 to 1024`},
		{[]string{"ib_write_bw", "-q", "1024", "-a"}, "-q 1024 with messages of up to 8388608 bytes needs"},
		{[]string{"ib_send_bw", "-u", "0"}, "-u: 0 (no retransmission timeout) is not offered"},
		{[]string{"ib_send_bw", "-m", "1000"}, "-m: invalid MTU 1000"},
		{[]string{"ib_write_bw", "--plot", "x.svg"}, "--plot draws one point per message size: it needs -a"},
		{[]string{"ib_send_bw", "-d", "nosuch"}, "IB device nosuch not found"},
		{[]string{"ib_send_bw", "-x", "99"}, "GID index 99"},
	} {
		code, _, errs := runCmd(c.args...)
		lines := strings.Split(strings.TrimRight(errs, "\n"), "\n")
		if code != 1 || !strings.Contains(lines[0], c.says) || len(lines) > 2 || strings.Contains(errs, "panic") {
			t.Errorf("%q: exit %d, stderr %q; want 1 and one line saying %q", c.args, code, errs, c.says)
		}
	}
}
