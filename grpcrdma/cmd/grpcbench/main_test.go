package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/memnet"
)

var serving = regexp.MustCompile(`serving over \w+ on (\S+)\n`)

// startServer runs grpcbench -s on a free port and returns its address.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out memnet.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"-s", "-a", "127.0.0.1:0"}, args...), &out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := serving.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the server did not start: %q", out.String())
	return ""
}

func TestClientMeasuresAgainstServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want *regexp.Regexp
	}{
		{"unary over rsocket", []string{"-op", "unary"}, regexp.MustCompile(`^unary over rsocket: [1-9]\d* calls of 64 bytes in \S+, \d+\.\d µs/call\n$`)},
		{"stream over rsocket", []string{"-op", "stream", "-size", "1000"}, regexp.MustCompile(`^stream over rsocket: [1-9]\d* messages of 1000 bytes in \S+, \d+\.\d MB/s\n$`)},
		{"unary over tcp", []string{"-tcp", "-op", "unary"}, regexp.MustCompile(`^unary over tcp: [1-9]\d* calls of 64 bytes in \S+, \d+\.\d µs/call\n$`)},
		{"stream over tcp", []string{"-tcp", "-op", "stream"}, regexp.MustCompile(`^stream over tcp: [1-9]\d* messages of 65536 bytes in \S+, \d+\.\d MB/s\n$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			memnet.NoLeaks(t)
			var srvArgs []string
			if tc.args[0] == "-tcp" {
				srvArgs = []string{"-tcp"}
			}
			addr := startServer(t, srvArgs...)
			var out strings.Builder
			if err := run(context.Background(), append([]string{"-a", addr, "-d", "100ms"}, tc.args...), &out); err != nil {
				t.Fatal(err)
			}
			if !tc.want.MatchString(out.String()) {
				t.Fatalf("grpcbench printed %q; want %v", out.String(), tc.want)
			}
		})
	}
}

func TestBadArgumentsAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-op", "bidi"},
		{"-size", "-1"},
		{"-size", "5000000"},
		{"-d", "0"},
		{"-d", "soon"},
		{"extra"},
		{"-nosuchflag"},
	} {
		var out strings.Builder
		if err := run(context.Background(), append([]string{"-a", "127.0.0.1:1"}, args...), &out); err == nil {
			t.Errorf("grpcbench %q ran; want an error", args)
		}
	}
}

func TestClientWithoutServerSaysSo(t *testing.T) {
	var out strings.Builder
	err := run(context.Background(), []string{"-a", "127.0.0.1:1", "-d", "10ms"}, &out)
	if err == nil || !strings.Contains(err.Error(), "connecting to 127.0.0.1:1 over rsocket") {
		t.Fatalf("grpcbench against nobody: %v", err)
	}
}
