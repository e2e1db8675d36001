//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// The command-line torture test: every command, every flag its -h
// output names, each with values a user might mistype (empty, zero,
// negative, sizes around 16 bytes, 2^31, 2^63, words), missing values,
// unknown flags, missing operands. Each case is a process of its own
// in a network namespace of its own (only a loopback interface), so
// that servers cannot meet one another, nothing leaves the host and no
// name is resolved by a real DNS server. A case must end, with status 0
// or with a message and a non-zero status, or be a server waiting for
// its peer; a panic, a runtime fatal error, a silent failure or a
// process still running at its deadline fails the test.

// cliProfile is how a command is run by the torture test.
type cliProfile struct {
	base   []string // arguments every case starts with
	client []string // arguments, after the generated ones, that make a client of a peer that is not there
	server []string // those making a server; nil: the command has no server mode
	ready  string   // what a server prints once it waits for its peer (besides listening on TCP)
	solo   []string // arguments, after the generated ones, of a command with no peer (nil: none)
	long   []string // flags whose value may make a run take as long as it asks
	// serve are flags that make a server of a client case (rping's -s,
	// the last of -c and -s winning); its words then show it waits.
	serve []string
	// readyAny: the ready words show a waiting server in any case, as
	// when a flag takes a client's operand as its value (rstream -f -s).
	readyAny bool
}

// cliProfiles has an entry for every command; the test fails for a
// command that has none, so that a new command is not left out.
func cliProfiles(capture string) map[string]cliProfile {
	perf := cliProfile{client: []string{"127.0.0.1"}, server: []string{}, long: []string{"-n", "--iters", "-D", "--duration", "--run_infinitely"}}
	pp := cliProfile{client: []string{"127.0.0.1"}, server: []string{}, long: []string{"-n", "--iters"}}
	p := map[string]cliProfile{
		"demo":         {base: []string{"-time", "10ms", "-size", "4096"}, solo: []string{}, long: []string{"-time"}},
		"devices":      {solo: []string{}},
		"devinfo":      {solo: []string{}},
		"dump":         {solo: []string{capture}},
		"fi_info":      {solo: []string{}},
		"version":      {solo: []string{}},
		"fi_pingpong":  {client: []string{"127.0.0.1"}, server: []string{}, long: []string{"-I"}},
		"mckey":        {base: []string{"-m", "239.1.2.3", "-b", "127.0.0.1"}, client: []string{"-s", "-C", "1"}, server: []string{}, ready: "joined", long: []string{"-C"}},
		"rc_pingpong":  pp,
		"uc_pingpong":  pp,
		"ud_pingpong":  pp,
		"srq_pingpong": pp,
		"rping":        {client: []string{"-c", "-a", "127.0.0.1"}, server: []string{"-s", "-d", "-a", "127.0.0.1"}, ready: "rdma_listen", long: []string{"-C"}, serve: []string{"-s"}},
		"riostream":    {client: []string{"-s", "127.0.0.1"}, server: []string{}, ready: "usec/xfer", long: []string{"-C", "-I"}, readyAny: true},
		"rstream":      {client: []string{"-s", "127.0.0.1"}, server: []string{}, ready: "usec/xfer", long: []string{"-C", "-I"}, readyAny: true},
		"udaddy":       {client: []string{"-s", "127.0.0.1"}, server: []string{}, ready: "starting server", long: []string{"-C"}},
		// A command with subcommands has a profile for each, named
		// "command subcommand", besides its own.
		"nvmeof":          {solo: []string{}},
		"nvmeof discover": {client: []string{"-a", "127.0.0.1"}},
		"nvmeof identify": {client: []string{"-a", "127.0.0.1", "-n", "nqn.x"}},
		"nvmeof read":     {client: []string{"-a", "127.0.0.1", "-n", "nqn.x", "-l", "4096"}},
		"nvmeof write":    {client: []string{"-a", "127.0.0.1", "-n", "nqn.x"}},
		"nvmeof flush":    {client: []string{"-a", "127.0.0.1", "-n", "nqn.x"}},
		"nvmeof bench":    {client: []string{"-a", "127.0.0.1", "-n", "nqn.x"}, long: []string{"-t"}},
		"nvmeof serve":    {server: []string{"-a", "127.0.0.1", "-n", "nqn.x", "-m", "1m"}, ready: "serving"},
	}
	for name := range commands {
		if strings.HasPrefix(name, "ib_") {
			p[name] = perf
		}
	}
	return p
}

// cliValues are the values each flag is given.
var cliValues = []string{"", "0", "-1", "1", "15", "16", "4096", "2147483648", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "abc", " 7 "}

// cliShortValues are those of a run without RDMAGO_CLI_ALL (the whole
// of cliValues makes the test take minutes more).
var cliShortValues = []string{"", "-1", "15", "9223372036854775808", "abc"}

// cliUnknown are flags no command has.
var cliUnknown = []string{"-Z", "--no-such-flag", "--no-such-flag=1", "-", "---"}

// cliCase is one command line.
type cliCase struct {
	args     []string
	server   bool   // a server: waiting for its peer is how it ends
	ready    string // what it prints once it waits
	readyAny bool   // its ready words show it waits, server or not
	mayLast  bool   // a flag of the case may make it run for as long as it asks
	deadline time.Duration
}

// flagPattern finds flags in -h output: "-x", "--long", "-long", at the
// start of a word or after "[", "(", "," or "|".
var flagPattern = regexp.MustCompile(`(?:^|[\s\[(,|])(--?[A-Za-z0-9][A-Za-z0-9_-]*)`)

// flagsOf returns the flags a command's -h output names.
func flagsOf(help string) []string {
	seen := map[string]bool{}
	for _, m := range flagPattern.FindAllStringSubmatch(help, -1) {
		f := m[1]
		switch f {
		case "-h", "--help", "-help", "--version":
			continue
		}
		seen[f] = true
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// netnsWrap returns the command running bin with args in a network
// namespace of its own whose loopback interface is up.
func netnsWrap(bin string, args []string) *exec.Cmd {
	return exec.Command("unshare", append([]string{"-rn", "sh", "-c", `ip link set lo up && exec "$@"`, "sh", bin}, args...)...)
}

// needNetns skips the test where unprivileged network namespaces
// cannot be made.
func needNetns(t *testing.T) {
	t.Helper()
	out, err := exec.Command("unshare", "-rn", "sh", "-c", "ip link set lo up && echo ok").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("ok")) {
		t.Skipf("cannot run each case in a network namespace of its own (unshare -rn, ip): %v %s", err, out)
	}
}

// cliOutcome is how a case ended.
type cliOutcome struct {
	status  int
	out     string
	killed  bool // it was still running: ready server, long run or hang
	ready   bool // a server that waited for its peer (or a client a flag made one)
	elapsed time.Duration
}

// syncBuffer is a bytes.Buffer written by a process and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// listensTCP says whether the network namespace of pid has a listening
// TCP socket: its process (the namespace's only one) waits for a peer.
func listensTCP(pid int) bool {
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 3 && fields[3] == "0A" {
				fh.Close()
				return true
			}
		}
		fh.Close()
	}
	return false
}

// runCase runs one case to its end, or kills it once it is a server
// waiting for its peer or its deadline has passed.
func runCase(bin string, c cliCase) cliOutcome {
	cmd := netnsWrap(bin, c.args)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return cliOutcome{status: -1, out: err.Error()}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	finish := func(err error, o cliOutcome) cliOutcome {
		o.out, o.elapsed = out.String(), time.Since(start)
		if ee, ok := err.(*exec.ExitError); ok {
			o.status = ee.ExitCode()
		} else if err != nil {
			o.status = -1
		}
		return o
	}
	kill := func(o cliOutcome) cliOutcome {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err := <-done
		o.killed = true
		return finish(err, o)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(c.deadline)
	readySince := time.Time{}
	for {
		select {
		case err := <-done:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything it left behind
			return finish(err, cliOutcome{})
		case <-deadline:
			return kill(cliOutcome{})
		case <-tick.C:
			// A server shows it waits by its words (in server mode
			// only: a client may print them too) or by listening on TCP.
			if readySince.IsZero() && ((c.server || c.readyAny) && c.ready != "" && strings.Contains(out.String(), c.ready) || listensTCP(cmd.Process.Pid)) {
				readySince = time.Now()
			}
			// A little longer, for a failure right after listening.
			if !readySince.IsZero() && time.Since(readySince) > 150*time.Millisecond {
				return kill(cliOutcome{ready: true})
			}
		}
	}
}

// judge returns what is wrong with a case's outcome, or "".
func judge(c cliCase, o cliOutcome) string {
	for _, bad := range []string{"panic:", "fatal error:", "goroutine 1 [", "SIGSEGV"} {
		if strings.Contains(o.out, bad) {
			return "crashed"
		}
	}
	switch {
	case o.status == -1 && !o.killed:
		return "did not start"
	case o.killed && (o.ready || c.server):
		return "" // a server waiting for its peer
	case o.killed && c.mayLast:
		return ""
	case o.killed:
		return fmt.Sprintf("still running after %v", c.deadline)
	case o.status != 0 && strings.TrimSpace(o.out) == "":
		return fmt.Sprintf("exit status %d without a word", o.status)
	}
	return ""
}

// aliasPattern finds "-x, --long" pairs of getopt-style help.
var aliasPattern = regexp.MustCompile(`(?m)^\s*(-[A-Za-z0-9]), (--[A-Za-z0-9][A-Za-z0-9_-]*)`)

// cliCases generates the cases of one command from its -h output. In
// full (RDMAGO_CLI_ALL set), every flag takes every value of cliValues in
// every spelling; otherwise those of cliShortValues, and the
// long name of a "-x, --long" pair takes one value, and a client whose
// dead peer costs seconds (perftest's, which retries) takes fewer.
func cliCases(name string, p cliProfile, help string, values []string, full bool) []cliCase {
	flags := flagsOf(help)
	alias := map[string]bool{}
	for _, m := range aliasPattern.FindAllStringSubmatch(help, -1) {
		alias[m[2]] = true
	}
	type mode struct {
		tail     []string
		server   bool
		deadline time.Duration
		values   []string
	}
	var modes []mode
	if p.solo != nil {
		modes = append(modes, mode{tail: p.solo, deadline: 15 * time.Second, values: values})
	}
	if p.client != nil {
		v := values
		if !full && strings.HasPrefix(name, "ib_") {
			v = []string{"-1", "15", "abc"}
		}
		modes = append(modes, mode{tail: p.client, deadline: 15 * time.Second, values: v})
	}
	if p.server != nil {
		// A server still running after a second waits for its peer.
		modes = append(modes, mode{tail: p.server, server: true, deadline: time.Second, values: values})
	}
	var cases []cliCase
	add := func(m mode, long bool, gen ...string) {
		args := append(strings.Fields(name), p.base...)
		args = append(args, gen...)
		args = append(args, m.tail...)
		server := m.server
		if !server && slices.ContainsFunc(gen, func(g string) bool { return slices.Contains(p.serve, g) }) {
			// The flag made a server of the client, which waits for its
			// peer through rdma_cm, where nothing but time shows it.
			server, m.deadline = true, time.Second
		}
		cases = append(cases, cliCase{args: args, server: server, ready: p.ready, readyAny: p.readyAny, mayLast: long, deadline: m.deadline})
	}
	for _, m := range modes {
		add(m, false) // as the profile has it
		// Missing operands: the mode's arguments left out, or cut short.
		for i := range m.tail {
			args := append(strings.Fields(name), p.base...)
			cases = append(cases, cliCase{args: append(args, m.tail[:i]...), server: true, ready: p.ready, deadline: time.Second})
		}
		for _, u := range cliUnknown {
			add(m, false, u)
		}
		for _, f := range flags {
			long := slices.Contains(p.long, f)
			add(m, long, f) // the flag alone: boolean, or taking the next argument as its value
			last := cliCase{args: append(append([]string{name}, p.base...), append(slices.Clone(m.tail), f)...),
				server: m.server, ready: p.ready, readyAny: p.readyAny, mayLast: long, deadline: m.deadline} // last of all: missing its value
			if slices.Contains(p.serve, f) {
				last.server, last.deadline = true, time.Second
			}
			cases = append(cases, last)
			if alias[f] && !full {
				add(m, long, f+"=16")
				continue
			}
			for _, v := range m.values {
				switch {
				case alias[f]:
					add(m, long, f+"="+v)
				case strings.HasPrefix(f, "--"):
					add(m, long, f, v)
					add(m, long, f+"="+v)
				default:
					add(m, long, f, v)
					if len(f) == 2 && v != "" && full {
						add(m, long, f+v) // getopt's -Sval
					}
				}
			}
		}
	}
	return cases
}

// TestEveryCommandLineEndsCleanly runs every command with generated
// argument lists: none may panic or hang, and a failure must say why.
func TestEveryCommandLineEndsCleanly(t *testing.T) {
	needNetns(t)
	bin := vmtest.BuildRdmago(t)
	capture := "../../testdata/captures/rc_pingpong.pcapng"
	profiles := cliProfiles(capture)
	full := os.Getenv("RDMAGO_CLI_ALL") != ""
	values := cliShortValues
	if full {
		values = cliValues
	}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for n := range profiles {
		if cmd, _, sub := strings.Cut(n, " "); sub {
			if _, ok := commands[cmd]; !ok {
				t.Errorf("profile %q is of no command", n)
			}
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var all []cliCase
	for _, name := range names {
		p, ok := profiles[name]
		if !ok {
			t.Errorf("command %s has no profile in cliProfiles", name)
			continue
		}
		help := runCase(bin, cliCase{args: append(strings.Fields(name), "-h"), deadline: 15 * time.Second})
		// Some tools exit 1 after their usage, as their C namesakes do
		// (fi_pingpong, rstream), so only the usage itself is required.
		if help.killed || strings.TrimSpace(help.out) == "" || help.status != 0 && !strings.Contains(strings.ToLower(help.out), "usage") {
			t.Errorf("%s -h: exit %d, killed %v:\n%s", name, help.status, help.killed, help.out)
		}
		cases := cliCases(name, p, help.out, values, full)
		t.Logf("%s: flags %v, %d cases", name, flagsOf(help.out), len(cases))
		all = append(all, cases...)
	}
	t.Logf("%d cases", len(all))
	type result struct {
		c cliCase
		o cliOutcome
	}
	work := make(chan cliCase)
	results := make(chan result)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				results <- result{c, runCase(bin, c)}
			}
		}()
	}
	go func() {
		for _, c := range all {
			work <- c
		}
		close(work)
		wg.Wait()
		close(results)
	}()
	failed, ready, long, ok := 0, 0, 0, 0
	var slowest result
	for r := range results {
		if r.o.elapsed > slowest.o.elapsed {
			slowest = r
		}
		if why := judge(r.c, r.o); why != "" {
			failed++
			if failed <= 60 {
				t.Errorf("rdmago %q: %s (exit %d):\n%s", r.c.args, why, r.o.status, tail(r.o.out, 1500))
			}
			continue
		}
		switch {
		case r.o.ready:
			ready++
		case r.o.killed:
			long++
		default:
			ok++
		}
	}
	t.Logf("%d cases: %d ended, %d servers waited for their peer, %d long runs stopped, %d failed; slowest %q %v",
		len(all), ok, ready, long, failed, slowest.c.args, slowest.o.elapsed.Round(time.Millisecond))
}

// tail returns the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
