package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFabricToolsRefuseBadFlagsClearly(t *testing.T) {
	for _, c := range []struct {
		args   []string
		status int
		says   string
	}{
		{[]string{"fi_pingpong", "-I", "x"}, 2, `-I "x": want a number`},
		{[]string{"fi_pingpong", "-e", "bogus"}, 1, `unknown endpoint type "bogus"`},
		{[]string{"fi_pingpong", "-h"}, 1, "Usage:"},
		{[]string{"fi_pingpong", "-m", "bogus"}, 1, `unknown transfer mode "bogus"`},
		{[]string{"fi_pingpong", "-p", "bogus"}, 61, `no provider "bogus"`},
		{[]string{"fi_pingpong", "-p", "verbs", "-d", "nosuch"}, 61, `no domain "nosuch" of provider "verbs"`},
		{[]string{"fi_info", "-t", "FI_EP_NOPE"}, 1, `unknown endpoint type "FI_EP_NOPE"`},
		{[]string{"fi_info", "-p", "nosuch"}, 61, "fi_getinfo: -61"},
	} {
		var out, errw bytes.Buffer
		if got := run(c.args, &out, &errw); got != c.status || !strings.Contains(errw.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, got, errw.String(), c.status, c.says)
		}
	}
}
