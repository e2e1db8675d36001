package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDumpCheckPassesOnGoldenCaptures(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/captures/*.pcapng")
	if len(files) == 0 {
		t.Fatal("no captures")
	}
	code, out, errs := runCmd(append([]string{"dump", "--check", "-q"}, files...)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	if n := strings.Count(out, "0 icrc bad, 0 malformed"); n != len(files) {
		t.Errorf("%d clean summaries for %d files:\n%s", n, len(files), out)
	}
}

func TestDumpExitStatus(t *testing.T) {
	dir := t.TempDir()
	golden := "../../testdata/captures/rc_pingpong.pcapng"
	data, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.pcapng")
	os.WriteFile(truncated, data[:len(data)-10], 0o644)
	corrupt := filepath.Join(dir, "corrupt.pcapng")
	bad := bytes.Clone(data)
	udp := bytes.Index(bad, []byte{0x12, 0xb7, 0x00, 0x58, 0x00, 0x00}) // UDP to 4791, length 88, checksum 0
	if udp < 0 {
		t.Fatal("no RoCEv2 packet found in the capture")
	}
	bad[udp+6+12+20] ^= 0x40 // a payload byte of the first SEND
	os.WriteFile(corrupt, bad, 0o644)
	garbage := filepath.Join(dir, "garbage.pcap")
	os.WriteFile(garbage, []byte("hello, world, this is no capture"), 0o644)

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", nil, 2, "usage: rdmago"},
		{"unknown command", []string{"frob"}, 2, `unknown command "frob"`},
		{"help", []string{"help"}, 0, ""},
		{"dump without files", []string{"dump"}, 2, "usage: rdmago dump"},
		{"dump bad flag", []string{"dump", "-z", golden}, 2, "flag provided but not defined: -z"},
		{"dump bad port", []string{"dump", "-port", "70000", golden}, 2, "-port 70000 is not a UDP port"},
		{"dump other port finds no RoCE", []string{"dump", "-check", "-port", "4792", golden}, 0, ""},
		{"dump -h", []string{"dump", "-h"}, 0, "usage: rdmago dump"},
		{"clean file", []string{"dump", "--check", golden}, 0, ""},
		{"flag after file", []string{"dump", golden, "--check"}, 0, ""},
		{"missing file", []string{"dump", filepath.Join(dir, "nope.pcap")}, 1, "nope.pcap: no such file"},
		{"truncated file without check", []string{"dump", truncated}, 1, "truncated.pcapng: offset "},
		{"truncated file", []string{"dump", "--check", truncated}, 1, "truncated.pcapng: offset "},
		{"bad ICRC without check", []string{"dump", corrupt}, 0, ""},
		{"bad ICRC with check", []string{"dump", "--check", corrupt}, 1, ""},
		{"garbage file", []string{"dump", "--check", garbage}, 1, "garbage.pcap: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runCmd(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if !strings.Contains(errs, tt.stderr) {
				t.Errorf("stderr %q lacks %q", errs, tt.stderr)
			}
		})
	}
}

func TestCommonFlags(t *testing.T) {
	tests := []struct {
		args    []string
		rest    []string
		want    common
		wantErr bool
	}{
		{[]string{"-n", "5"}, []string{"-n", "5"}, common{}, false},
		{[]string{"--stats", "-n", "5"}, []string{"-n", "5"}, common{stats: true}, false},
		{[]string{"--cpuprofile", "p.out", "x"}, []string{"x"}, common{cpuProfile: "p.out"}, false},
		{[]string{"--cpuprofile=p.out", "--stats"}, []string{}, common{stats: true, cpuProfile: "p.out"}, false},
		{[]string{"--", "--stats"}, []string{"--", "--stats"}, common{}, false},
		{[]string{"--cpuprofile"}, nil, common{}, true},
		{[]string{"--cpuprofile="}, nil, common{}, true},
	}
	for _, tc := range tests {
		rest, c, err := commonFlags(tc.args)
		if (err != nil) != tc.wantErr {
			t.Fatalf("commonFlags(%q) error %v", tc.args, err)
		}
		if err != nil {
			continue
		}
		if !slices.Equal(rest, tc.rest) || c != tc.want {
			t.Errorf("commonFlags(%q) = %q, %+v; want %q, %+v", tc.args, rest, c, tc.rest, tc.want)
		}
	}
}

func TestCPUProfileIsWritten(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cpu.out")
	var out, errs strings.Builder
	if code := run([]string{"version", "--cpuprofile=" + file}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() == 0 {
		t.Fatalf("profile: %v", err)
	}
	if code := run([]string{"version", "--cpuprofile=" + filepath.Join(file, "no", "such")}, &out, &errs); code != 1 {
		t.Fatalf("unwritable profile: exit %d", code)
	}
}
