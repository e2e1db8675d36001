package link_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

// The tests here run a copy of the test binary as another user (nobody,
// 65534), which needs root; the copy does what childEnv says and reports
// on its standard output.

const (
	childEnv = "RDMAGO_LINK_TEST_CHILD"
	nobody   = 65534
)

var (
	childOnce sync.Once
	childDir  string
	childBin  string
	childErr  error
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode, os.Args[1:]))
	}
	code := m.Run()
	if childDir != "" {
		os.RemoveAll(childDir)
	}
	os.Exit(code)
}

// otherUser is a process of the test binary running as nobody.
type otherUser struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	errb  strings.Builder
}

// startOther starts the test binary as nobody, in mode with args, and
// returns once it has written its first line, which it returns too.
func startOther(t *testing.T, mode string, args ...string) (*otherUser, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running a process as another user needs root")
	}
	childOnce.Do(func() {
		// The go tool's build directory is closed to other users: copy
		// the binary where nobody may run it.
		if childDir, childErr = os.MkdirTemp("", "rdmago-link-test"); childErr != nil {
			return
		}
		if childErr = os.Chmod(childDir, 0o755); childErr != nil {
			return
		}
		var self string
		if self, childErr = os.Executable(); childErr != nil {
			return
		}
		var b []byte
		if b, childErr = os.ReadFile(self); childErr != nil {
			return
		}
		childBin = filepath.Join(childDir, "link.test")
		childErr = os.WriteFile(childBin, b, 0o755)
	})
	if childErr != nil {
		t.Fatal(childErr)
	}
	o := &otherUser{cmd: exec.Command(childBin, args...), lines: make(chan string, 16)}
	o.cmd.Env = append(os.Environ(), childEnv+"="+mode)
	o.cmd.Dir = childDir
	o.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	o.cmd.Stderr = &o.errb
	var err error
	if o.in, err = o.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := o.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			o.lines <- sc.Text()
		}
		close(o.lines)
	}()
	t.Cleanup(func() { o.in.Close(); o.cmd.Process.Kill(); o.cmd.Wait() })
	return o, o.line(t)
}

// line returns the next line the process writes.
func (o *otherUser) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-o.lines:
		if !ok {
			o.cmd.Wait()
			t.Fatalf("the other user's process ended: %s", o.errb.String())
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("the other user's process said nothing for 30 s: %s", o.errb.String())
	}
	return ""
}

// finish closes the process's input, which ends it, and returns its last
// line.
func (o *otherUser) finish(t *testing.T) string {
	t.Helper()
	o.in.Close()
	return o.line(t)
}

// runChild is the other user's process: it does what mode says on the
// address 127.0.0.1:args[0] and writes what came of it.
func runChild(mode string, args []string) int {
	if len(args) < 1 {
		fmt.Println("usage: port [arg]")
		return 2
	}
	port, _ := strconv.Atoi(args[0])
	ap := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	base := "@rdmago/" + args[0] + "/127.0.0.1/"
	arg := ""
	if len(args) > 1 {
		arg = args[1]
	}
	wait := func() { io.Copy(io.Discard, os.Stdin) } // until the test closes our input
	switch mode {
	case "join": // join the address's group as owner arg
		owner, _ := strconv.Atoi(arg)
		s, err := link.ListenShared(ap, uint8(owner), link.UDPOptions{})
		if err != nil {
			fmt.Printf("refused addrinuse=%v: %v\n", errors.Is(err, syscall.EADDRINUSE), err)
			return 0
		}
		fmt.Printf("joined leading=%v\n", s.Leading())
		wait()
		s.Close()
		fmt.Println("closed")
	case "inject": // offer a packet to owner arg as if leading
		c, err := net.Dial("unix", base+"fwd/"+arg)
		if err != nil {
			fmt.Println("dial:", err)
			return 0
		}
		pkt := make([]byte, 64)
		pkt[0] = 0x64 // RC SEND only
		frame := binary.BigEndian.AppendUint16(nil, uint16(len(pkt)))
		frame = append(frame, 1, 0, 64, 0, 0, 0, 0, 0)
		src := netip.MustParseAddr("127.0.0.9").As16()
		frame = append(frame, src[:]...)
		frame = append(frame, pkt...)
		c.Write(frame)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err = c.Read(make([]byte, 1))
		fmt.Printf("sent; then %v\n", err)
		wait()
	case "owner": // take owner arg's name and count what arrives on it
		ln, err := net.Listen("unix", base+"fwd/"+arg)
		if err != nil {
			fmt.Println("listen:", err)
			return 0
		}
		var mu sync.Mutex
		var conns, bytes int
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns++
				mu.Unlock()
				go func() {
					n, _ := io.Copy(io.Discard, c)
					mu.Lock()
					bytes += int(n)
					mu.Unlock()
				}()
			}
		}()
		fmt.Println("ready")
		wait()
		time.Sleep(100 * time.Millisecond) // for the copies to finish
		mu.Lock()
		fmt.Printf("connections %d bytes %d\n", conns, bytes)
		mu.Unlock()
	case "service": // claim service arg, answering owner 1, as a listener of the group would
		ln, err := net.Listen("unix", base+"svc/"+arg)
		if err != nil {
			fmt.Println("listen:", err)
			return 0
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte{1})
				c.Close()
			}
		}()
		fmt.Println("ready")
		wait()
		fmt.Println("done")
	case "bind": // try to bind the port until told to stop
		stop := make(chan struct{})
		go func() { wait(); close(stop) }()
		tries, bound := 0, ""
		attempt := func(network string, ip netip.Addr, reuse bool) {
			tries++
			lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
				if reuse {
					c.Control(func(fd uintptr) {
						unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
						unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
					})
				}
				return nil
			}}
			c, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(ip, uint16(port)).String())
			if err == nil {
				bound += fmt.Sprintf(" %v/%v/reuse=%v", network, ip, reuse)
				c.Close()
			}
		}
		fmt.Println("binding")
		for {
			select {
			case <-stop:
				if bound == "" {
					bound = " never"
				}
				fmt.Printf("tries %d bound%s\n", tries, bound)
				return 0
			default:
			}
			for _, reuse := range []bool{false, true} {
				attempt("udp4", netip.MustParseAddr("127.0.0.1"), reuse)
				attempt("udp4", netip.IPv4Unspecified(), reuse)
			}
		}
	default:
		fmt.Println("unknown mode", mode)
		return 2
	}
	return 0
}

// A process of another user cannot join an address root's processes
// share: it is told so, and never gets to follow.
func TestSharedRefusesAnotherUsersProcess(t *testing.T) {
	lead, _, port := sharedPair(t)
	_, got := startOther(t, "join", strconv.Itoa(int(port)), "5")
	want := fmt.Sprintf("refused addrinuse=true: rxe/link: 127.0.0.1:%d is in use by another user's rdmago (uid 0)", port)
	if !strings.HasPrefix(got, want) {
		t.Fatalf("the other user's process says %q; want %q", got, want)
	}
	waitFor(t, "the leader to refuse the other user's process", func() bool { return lead.Refused() > 0 })
}

// Root joins any user's group, as root binds into any user's
// SO_REUSEPORT group: it follows a nobody leader and takes the port over
// when that leader goes.
func TestSharedRootJoinsAnotherUsersAddress(t *testing.T) {
	checkNoLeaks(t)
	port := freeSharedPort(t)
	o, got := startOther(t, "join", strconv.Itoa(int(port)), "0")
	if got != "joined leading=true" {
		t.Fatalf("the other user's process says %q", got)
	}
	f, err := link.ListenShared(netip.AddrPortFrom(addr1, port), 1, link.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Leading() {
		t.Fatal("root leads beside a nobody leader")
	}
	if got := o.finish(t); got != "closed" {
		t.Fatalf("the other user's process says %q", got)
	}
	waitLeading(t, f)
}

// A process of another user cannot hand a follower packets: the follower
// closes its connection unread, and reads only what its leader forwards.
func TestSharedFollowerRefusesAnotherUsersPackets(t *testing.T) {
	lead, follow, port := sharedPair(t)
	_, got := startOther(t, "inject", strconv.Itoa(int(port)), "1")
	if got != "sent; then EOF" && !strings.HasSuffix(got, "connection reset by peer") {
		t.Fatalf("the other user's process says %q", got)
	}
	if follow.Refused() == 0 {
		t.Fatal("the follower closed the connection but did not count it")
	}
	pkt := link.Packet{Buf: newPacket(t, newRand(3), wire.RCSendOnly, 100, 7), Addr: addr2}
	lead.Forward(1, &pkt)
	lead.Flush()
	got2 := recvAll(t, follow, 1, 5*time.Second)
	checkSamePackets(t, got2, []link.Packet{pkt}, addr2)
	time.Sleep(50 * time.Millisecond)
	if n, _ := follow.TryRecv([]link.Packet{{Buf: make([]byte, 9000)}}); n != 0 {
		t.Errorf("the follower read %d more packets", n)
	}
}

// A leader forwards nothing to an owner's name another user's process
// holds: the packets are dropped and counted.
func TestSharedLeaderDoesNotForwardToAnotherUser(t *testing.T) {
	lead, _, port := sharedPair(t)
	o, got := startOther(t, "owner", strconv.Itoa(int(port)), "7")
	if got != "ready" {
		t.Fatalf("the other user's process says %q", got)
	}
	pkt := link.Packet{Buf: newPacket(t, newRand(4), wire.RCSendOnly, 100, 7), Addr: addr2}
	for range 3 {
		lead.Forward(7, &pkt)
		lead.Flush()
	}
	st := lead.Stats()
	if st.Forwarded != 0 || st.ForwardDrops != 3 || lead.Refused() == 0 {
		t.Errorf("Forwarded %d, ForwardDrops %d, Refused %d; want 0, 3, some", st.Forwarded, st.ForwardDrops, lead.Refused())
	}
	if got := o.finish(t); !strings.HasSuffix(got, "bytes 0") {
		t.Errorf("the other user's process says %q; want no bytes", got)
	}
}

// A service another user's process claims is no service of the group:
// the leader routes no request to it, and a process of the group that
// claims it is told who has it.
func TestSharedServiceOfAnotherUserIsNotTheGroups(t *testing.T) {
	lead, follow, port := sharedPair(t)
	const id = 0x106_4242
	_, got := startOther(t, "service", strconv.Itoa(int(port)), strconv.FormatUint(id, 16))
	if got != "ready" {
		t.Fatalf("the other user's process says %q", got)
	}
	if o, ok, unknown := lead.ServiceOwner(id); ok || unknown {
		t.Errorf("ServiceOwner = %d, %v, %v; want unclaimed", o, ok, unknown)
	}
	_, err := follow.RegisterService(id)
	if !errors.Is(err, link.ErrServiceTaken) || !strings.Contains(err.Error(), "another user's process (uid 65534)") {
		t.Errorf("RegisterService: %v", err)
	}
}

// When the leader goes, the port stays bound to the group until a
// follower reads it: another user's process trying to bind it all the
// while never gets it, and packets that come in between wait for the new
// leader.
func TestSharedPortNeverFreeBetweenLeaders(t *testing.T) {
	lead, follow, port := sharedPair(t)
	o, got := startOther(t, "bind", strconv.Itoa(int(port)))
	if got != "binding" {
		t.Fatalf("the other user's process says %q", got)
	}
	p2, err := link.ListenUDP(netip.AddrPortFrom(addr2, port), link.UDPOptions{})
	if err != nil {
		t.Skipf("port %d taken on %v: %v", port, addr2, err)
	}
	defer p2.Close()
	time.Sleep(50 * time.Millisecond) // let it try a while beside the leader
	lead.Close()
	var sent []link.Packet
	for i := range 3 {
		pkt := link.Packet{Buf: newPacket(t, newRand(uint64(20+i)), wire.UDSendOnly, 64, 5), Addr: addr1}
		if err := p2.Send([]link.Packet{pkt}); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, pkt)
		if i == 0 {
			waitLeading(t, follow)
		}
	}
	checkSamePackets(t, recvAll(t, follow, len(sent), 5*time.Second), sent, addr2)
	time.Sleep(50 * time.Millisecond) // and a while beside the new leader
	got = o.finish(t)
	if !strings.HasSuffix(got, "bound never") || strings.HasPrefix(got, "tries 0 ") {
		t.Errorf("the other user's process says %q; want tries and no bind", got)
	}
}

// freeSharedPort returns a port free on 127.0.0.1 and 127.0.0.2.
func freeSharedPort(t *testing.T) uint16 {
	t.Helper()
	a, _ := listenPair(t, addr1, addr2, link.UDPOptions{})
	port := a.Port()
	a.Close()
	return port
}

// waitFor waits until cond holds, failing t after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
