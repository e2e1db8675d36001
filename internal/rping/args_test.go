package rping

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	// Host names resolve through a fake: tests do not depend on DNS.
	defer func(f func(context.Context, string, string) ([]netip.Addr, error)) { lookupNetIP = f }(lookupNetIP)
	lookupNetIP = func(_ context.Context, _, host string) ([]netip.Addr, error) {
		switch host {
		case "rping-server":
			return []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.7"), netip.MustParseAddr("2001:db8::7")}, nil
		case "flaky":
			return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	ip := netip.MustParseAddr
	def := Defaults()
	server, client := def, def
	server.Server = true
	tests := []struct {
		name   string
		args   []string
		want   Options
		status int // -1: no error
		stdout string
		stderr string
	}{
		{"server defaults", []string{"-s"}, server, -1, "", ""},
		{"client defaults", []string{"-c"}, client, -1, "", ""},
		{"all flags", []string{"-s", "-a", "10.0.0.1", "-p", "1234", "-C", "5", "-S", "1000", "-v", "-V", "-q", "-P"},
			Options{Server: true, Addr: ip("10.0.0.1"), Port: 1234, Count: 5, Size: 1000, Verbose: true, Validate: true, SelfCreateQP: true, Persistent: true}, -1, "", ""},
		{"grouped and attached", []string{"-cvV", "-S65535", "-C0", "-a10.0.0.1", "-I", "10.0.0.2"},
			Options{Addr: ip("10.0.0.1"), Source: ip("10.0.0.2"), Port: DefaultPort, Size: 65535, Verbose: true, Validate: true}, -1, "", ""},
		{"IPv6", []string{"-s", "-a", "::0"}, Options{Server: true, Addr: ip("::"), Port: DefaultPort, Size: DefaultSize}, -1, "", ""},
		{"host name, first address", []string{"-c", "-a", "rping-server"}, Options{Addr: ip("192.0.2.7"), Port: DefaultPort, Size: DefaultSize}, -1, "", ""},
		{"last of -s and -c wins", []string{"-s", "-c"}, client, -1, "", ""},
		{"operands are skipped", []string{"-c", "extra", "-a", "10.0.0.1", "more"}, Options{Addr: ip("10.0.0.1"), Port: DefaultPort, Size: DefaultSize}, -1, "", ""},
		{"-- ends the options", []string{"-s", "--", "-c"}, server, -1, "", ""},
		{"client ignores -P", []string{"-c", "-P"}, client, -1, "", ""},
		{"port not a number is refused", []string{"-s", "-p", "80x"}, Options{}, einval, "", "Invalid port \"80x\": -p takes a port number from 1 to 65535\n"},
		{"debug", []string{"-d", "-vV", "-s", "-S", "100", "-C", "3", "-p", "99"},
			Options{Server: true, Addr: def.Addr, Port: 99, Count: 3, Size: 100, Verbose: true, Validate: true, Debug: true}, -1,
			"verbose\nvalidate data\nserver\nsize 100\ncount 3\nport 99\n", ""},

		{"no side", nil, Options{}, einval, "rdmago rping -s [-vVd]", ""},
		{"no side, only flags", []string{"-v", "-a", "10.0.0.1"}, Options{}, einval, "rdmago rping -c [-vVd]", ""},
		{"unknown flag", []string{"-s", "-x"}, Options{}, einval, "\t-q\t\tuse self-created, self-modified QP\n", "rdmago rping: invalid option -- 'x'\n"},
		{"-t is refused", []string{"-s", "-t", "8"}, Options{}, einval, "rdmago rping -s", ""},
		{"missing argument", []string{"-s", "-S"}, Options{}, einval, "rdmago rping -s", "rdmago rping: option requires an argument -- 'S'\n"},
		{"long flag", []string{"-s", "--size=64"}, Options{}, einval, "rdmago rping -s", "rdmago rping: invalid option -- '-'\n"},
		{"size too small", []string{"-s", "-S", "22"}, Options{}, einval, "", "Invalid size 22 (valid range is 23 to 65536)\n"},
		{"size too large", []string{"-c", "-S", "65536"}, Options{}, einval, "", "Invalid size 65536 (valid range is 23 to 65536)\n"},
		{"size not a number", []string{"-c", "-S", "big"}, Options{}, einval, "", "Invalid size 0 (valid range is 23 to 65536)\n"},
		{"size error sticks", []string{"-S", "5", "-a", "10.0.0.1", "-s"}, Options{}, einval, "", "Invalid size 5 (valid range is 23 to 65536)\n"},
		{"negative count", []string{"-c", "-C", "-1"}, Options{}, einval, "", "Invalid count -1\n"},
		{"bad address", []string{"-c", "-a", "not an address"}, Options{}, 254,
			"getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n", ""},
		{"empty address", []string{"-c", "-a", ""}, Options{}, 254,
			"getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n", ""},
		{"bad source address", []string{"-c", "-a", "10.0.0.1", "-I", "nowhere"}, Options{}, 254,
			"getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n", ""},
		{"name server down", []string{"-c", "-a", "flaky"}, Options{}, 253,
			"getaddrinfo failed (Temporary failure in name resolution) - invalid hostname or IP address\n", ""},
		{"help", []string{"-h"}, Options{}, 0, "\t-c\t\tclient side\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			got, err := ParseArgs(tt.args, &out, &errs)
			if tt.status < 0 {
				if err != nil {
					t.Fatalf("error %v\n%s%s", err, out.String(), errs.String())
				}
				tt.want.Idle = DefaultIdle
				if got != tt.want {
					t.Errorf("options\n got %+v\nwant %+v", got, tt.want)
				}
			} else if err == nil || ExitStatus(err) != tt.status {
				t.Errorf("error %v, status %d, want status %d", err, ExitStatus(err), tt.status)
			}
			if tt.stdout == "" && out.Len() > 0 || !strings.Contains(out.String(), tt.stdout) {
				t.Errorf("stdout %q, want %q", out.String(), tt.stdout)
			}
			if errs.String() != tt.stderr {
				t.Errorf("stderr %q, want %q", errs.String(), tt.stderr)
			}
		})
	}
}

func TestAtoi(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{
		{"64", 64}, {" \t+7", 7}, {"-3", -3}, {"12ab", 12}, {"", 0}, {"x1", 0}, {"-", 0},
		{"99999999999", 1<<31 - 1}, {"-99999999999", -1 << 31},
	} {
		if got := atoi(tt.in); got != tt.want {
			t.Errorf("atoi(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestRunChecksOptions(t *testing.T) {
	for _, o := range []Options{
		{Size: 10},
		{Size: 64, Count: -1},
		{Size: 64, Persistent: true},
	} {
		if err := Run(context.Background(), o, new(bytes.Buffer), new(bytes.Buffer)); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
