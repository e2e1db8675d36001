package rdmacore_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// These tests run the rdma-core provider where there is a kernel RDMA
// stack: the VMs of shared/interop/vm, whose kernels run Soft-RoCE (rxe0).
// They build with -tags rdmacore here and run the binaries in vm1, against
// rdma-core's own tools in vm2 and against the software device on the host
// side of the harness.

// buildFor builds a binary with the rdmacore tag (go build, or go test -c
// when test is set) and copies it into vm1 as /tmp/<name>.
func buildFor(t *testing.T, vm, name, pkg string, test bool) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	args := []string{"build", "-tags", "rdmacore", "-o", out, pkg}
	if test {
		args = []string{"test", "-c", "-tags", "rdmacore", "-o", out, pkg}
	}
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(vm, "exec", "1", "cat >/tmp/"+name+" && chmod +x /tmp/"+name)
	cmd.Stdin = f
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("copying %s into vm1: %v\n%s", name, err, b)
	}
	return "/tmp/" + name
}

// TestInteropConformanceOnLinuxRXE runs the verbs conformance suite on
// vm1's rxe0 through the rdma-core provider.
func TestInteropConformanceOnLinuxRXE(t *testing.T) {
	vm := vmtest.VM(t, "Linux Soft-RoCE through rdma-core")
	bin := buildFor(t, vm, "rdmacore.test", "github.com/rdmago/rdmago/rdmacore", true)
	out, err := exec.Command(vm, "exec", "1", bin+" -test.run 'TestConformance|TestDeviceFieldsAreTheKernels' -test.v -test.count 1").CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the suite failed on rxe0: %v", err)
	}
	pass := len(regexp.MustCompile(`(?m)^    --- PASS`).FindAll(out, -1))
	skip := len(regexp.MustCompile(`(?m)^    --- SKIP`).FindAll(out, -1))
	if pass < 20 {
		t.Fatalf("%d cases passed, %d skipped: the device ran too little of the suite", pass, skip)
	}
	t.Logf("rxe0: %d cases passed, %d skipped as the kernel's known departures", pass, skip)
}

// pair runs server, then client (again while the server still waits, if
// the client came too early), and checks that both exit 0 and print what
// they must.
func pair(t *testing.T, server, client *exec.Cmd, serverWants, clientWants string) {
	t.Helper()
	var sout bytes.Buffer
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- server.Wait() }()
	var cout []byte
	var cerr error
	for try := 0; try < 5; try++ {
		time.Sleep(2 * time.Second) // the guests are emulated and slow to start a program
		c := exec.Command(client.Path, client.Args[1:]...)
		if cout, cerr = c.CombinedOutput(); cerr == nil {
			break
		}
		select {
		case err := <-done:
			done <- err
			try = 5
		default:
		}
	}
	if cerr != nil {
		server.Process.Kill() // the guest's timeout ends the program itself
	}
	serr := <-done
	if cerr != nil || serr != nil || !strings.Contains(sout.String(), serverWants) || !bytes.Contains(cout, []byte(clientWants)) {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout, serr, sout.String())
	}
}

// TestInteropRdmacoreTools runs `rdmago` built with the rdmacore tag in
// vm1 against rdma-core's tools in vm2, both ways, and against the
// software device on the harness's host side.
func TestInteropRdmacoreTools(t *testing.T) {
	vm := vmtest.VM(t, "rdma-core's tools through the rdma-core provider")
	if out, err := exec.Command(vm, "exec", "2", "ibv_devices").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("rxe0")) {
		t.Skipf("vm2 is not up with rxe0 (vm up 2): %v\n%s", err, out)
	}
	bin := buildFor(t, vm, "rdmago-rdmacore", "github.com/rdmago/rdmago/cmd/rdmago", false)
	srvEx := buildFor(t, vm, "rdma_server-rdmacore", "github.com/rdmago/rdmago/examples/rdma_server", false)
	cliEx := buildFor(t, vm, "rdma_client-rdmacore", "github.com/rdmago/rdmago/examples/rdma_client", false)
	fabSrv := buildFor(t, vm, "fabric_server-rdmacore", "github.com/rdmago/rdmago/examples/fabric_server", false)
	rcEx := buildFor(t, vm, "rdma_rc_example-rdmacore", "github.com/rdmago/rdmago/examples/rdma_rc_example", false)
	host := vmtest.BuildRdmago(t)
	hostFabCli := filepath.Join(t.TempDir(), "fabric_client")
	if b, err := exec.Command("go", "build", "-o", hostFabCli, "github.com/rdmago/rdmago/examples/fabric_client").CombinedOutput(); err != nil {
		t.Fatalf("go build fabric_client: %v\n%s", err, b)
	}
	hostRCEx := filepath.Join(t.TempDir(), "rdma_rc_example")
	if b, err := exec.Command("go", "build", "-o", hostRCEx, "github.com/rdmago/rdmago/examples/rdma_rc_example").CombinedOutput(); err != nil {
		t.Fatalf("go build rdma_rc_example: %v\n%s", err, b)
	}
	onHost := func(args ...string) *exec.Cmd {
		return exec.Command(vm, append([]string{"host", "env", "RDMAGO_RXE_ADDR=10.77.0.1", "timeout", vmtest.Timeout}, args...)...)
	}
	const to = "timeout " + vmtest.Timeout + " "
	const rdmago = "RDMAGO_PROVIDER=rdmacore " + to
	in := func(n int, cmd string) *exec.Cmd { return exec.Command(vm, "exec", fmt.Sprint(n), cmd) }
	for _, c := range []struct {
		name                     string
		server, client           *exec.Cmd
		serverWants, clientWants string
	}{
		{"rc_pingpong rdmago client, ibv_rc_pingpong server",
			in(2, to+"ibv_rc_pingpong -d rxe0 -g 1 -n 200"), in(1, rdmago+bin+" rc_pingpong -d rxe0 -g 1 -n 200 10.77.0.12"),
			"200 iters", "200 iters"},
		{"rc_pingpong rdmago server, ibv_rc_pingpong client",
			in(1, rdmago+bin+" rc_pingpong -d rxe0 -g 1 -n 200 -e"), in(2, to+"ibv_rc_pingpong -d rxe0 -g 1 -n 200 -e 10.77.0.11"),
			"200 iters", "200 iters"},
		{"ud_pingpong rdmago client, ibv_ud_pingpong server",
			in(2, to+"ibv_ud_pingpong -d rxe0 -g 1 -n 200 -s 512"), in(1, rdmago+bin+" ud_pingpong -d rxe0 -g 1 -n 200 -s 512 10.77.0.12"),
			"200 iters", "200 iters"},
		{"srq_pingpong rdmago server, ibv_srq_pingpong client",
			in(1, rdmago+bin+" srq_pingpong -d rxe0 -g 1 -n 200"), in(2, to+"ibv_srq_pingpong -d rxe0 -g 1 -n 200 10.77.0.11"),
			"200 iters", "200 iters"},
		{"uc_pingpong rdmago client, ibv_uc_pingpong server",
			in(2, to+"ibv_uc_pingpong -d rxe0 -g 1 -n 200"), in(1, rdmago+bin+" uc_pingpong -d rxe0 -g 1 -n 200 10.77.0.12"),
			"200 iters", "200 iters"},
		{"rc_pingpong over IPv6 GIDs, rdmago server, ibv_rc_pingpong client",
			in(1, rdmago+bin+" rc_pingpong -d rxe0 -g 2 -n 200"), in(2, to+"ibv_rc_pingpong -d rxe0 -g 2 -n 200 10.77.0.11"),
			"200 iters", "200 iters"},
		{"rdma_server example, rdma_client over IPv6",
			in(1, rdmago+srvEx+" -s fd77::11"), in(2, to+"rdma_client -s fd77::11"),
			"rdma_server: end 0", "rdma_client: end 0"},
		{"rdma_client example, rdma_server",
			in(2, to+"rdma_server -s 10.77.0.12"), in(1, rdmago+cliEx+" -s 10.77.0.12"),
			"rdma_server: end 0", "rdma_client: end 0"},
		{"rping rdmago client, rping server",
			in(2, to+"rping -s -a 10.77.0.12 -v -C 10"), in(1, rdmago+bin+" rping -c -a 10.77.0.12 -v -C 10"),
			"server ping data: rdma-ping-9", "ping data: rdma-ping-9"},
		{"rping rdmago server, rping client",
			in(1, rdmago+bin+" rping -s -a 10.77.0.11 -v -C 10"), in(2, to+"rping -c -a 10.77.0.11 -v -C 10"),
			"server ping data: rdma-ping-9", "ping data: rdma-ping-9"},
		{"udaddy rdmago client, udaddy server",
			in(2, to+"udaddy -c 2 -C 10"), in(1, rdmago+bin+" udaddy -s 10.77.0.12 -c 2 -C 10"),
			"test complete", "test complete"},
		{"udaddy rdmago server, udaddy client",
			in(1, rdmago+bin+" udaddy -c 2 -C 10"), in(2, to+"udaddy -s 10.77.0.11 -c 2 -C 10"),
			"test complete", "test complete"},
		{"mckey rdmago sender, mckey receiver",
			in(2, to+"mckey -m 239.77.1.1 -b 10.77.0.12 -C 20"), in(1, rdmago+bin+" mckey -s -m 239.77.1.1 -b 10.77.0.11 -C 20"),
			"data transfers complete\ntest complete\nreturn status 0", "data transfers complete\ntest complete\nreturn status 0"},
		{"mckey rdmago receiver, mckey sender",
			in(1, rdmago+bin+" mckey -m 239.77.1.2 -b 10.77.0.11 -C 20"), in(2, to+"mckey -s -m 239.77.1.2 -b 10.77.0.12 -C 20"),
			"data transfers complete\ntest complete\nreturn status 0", "data transfers complete\ntest complete\nreturn status 0"},
		{"rc_pingpong rdmacore in vm1, software device on the host",
			exec.Command(vm, "host", "env", "RDMAGO_RXE_ADDR=10.77.0.1", "timeout", vmtest.Timeout, host, "rc_pingpong", "-d", "rxe_br0", "-g", "0", "-n", "200"),
			in(1, rdmago+bin+" rc_pingpong -d rxe0 -g 1 -n 200 10.77.0.1"),
			"200 iters", "200 iters"},
		{"fi_pingpong -p verbs rdmago client, libfabric's server",
			in(2, to+"fi_pingpong -p verbs -e msg -S 4096 -I 100 -c"), in(1, rdmago+bin+" fi_pingpong -p verbs -e msg -S 4096 -I 100 -c 10.77.0.12"),
			"=100", "=100"},
		{"fi_pingpong -p verbs rdmago server, libfabric's client",
			in(1, rdmago+bin+" fi_pingpong -p verbs -e msg -S 4096 -I 100 -c"), in(2, to+"fi_pingpong -p verbs -e msg -S 4096 -I 100 -c 10.77.0.11"),
			"=100", "=100"},
		{"fi_pingpong -p verbs -e rdm rdmago client, libfabric's verbs;ofi_rxm server",
			in(2, to+"env FI_UNIVERSE_SIZE=32 fi_pingpong -p verbs -e rdm -I 4 -c"), in(1, rdmago+bin+" fi_pingpong -p verbs -e rdm -I 4 -c 10.77.0.12"),
			"1m      4       =4", "1m      4       =4"},
		{"fi_pingpong -p verbs dgram rdmago server, libfabric's client (link-local GIDs)",
			in(1, rdmago+bin+" fi_pingpong -p verbs -S 64 -I 100 -c"), in(2, to+"fi_pingpong -p verbs -S 64 -I 100 -c 10.77.0.11"),
			"=100", "=100"},
		{"ib_write_bw rdmago client, perftest server",
			in(2, to+"ib_write_bw -d rxe0 -x 1 -F -n 200 -s 4096"), in(1, rdmago+bin+" ib_write_bw -d rxe0 -x 1 -F -n 200 -s 4096 10.77.0.12"),
			" 4096       200 ", " 4096       200 "},
		{"ib_send_lat rdmago server, perftest client",
			in(1, rdmago+bin+" ib_send_lat -d rxe0 -x 1 -F -n 200 -s 64"), in(2, to+"ib_send_lat -d rxe0 -x 1 -F -n 200 -s 64 10.77.0.11"),
			" 64      200 ", " 64      200 "},
		{"fabric_server example over verbs on rdma-core, fabric_client on the host's software device",
			in(1, rdmago+fabSrv+" -p verbs -a 10.77.0.11 -port 9300"),
			exec.Command(vm, "host", "env", "RDMAGO_RXE_ADDR=10.77.0.1", "timeout", vmtest.Timeout, hostFabCli, "-p", "verbs", "-a", "10.77.0.11", "-port", "9300"),
			`region holds "RDMA WRITE over verbs", counter 5`, "fetch-and-add 5: 0 before, 5 after"},
		{"rdma_rc_example server through rdma-core in vm1, client on the host's software device",
			in(1, rdmago+rcEx+" -d rxe0 -g 1"), onHost(hostRCEx, "-d", "rxe_br0", "-g", "0", "10.77.0.11"),
			"test result is 0", "test result is 0"},
		{"rdma_rc_example server on the host's software device, client through rdma-core in vm1",
			onHost(hostRCEx, "-d", "rxe_br0", "-g", "0"), in(1, rdmago+rcEx+" -d rxe0 -g 1 10.77.0.1"),
			"test result is 0", "test result is 0"},
		{"rping rdmacore client in vm1, software device server on the host",
			exec.Command(vm, "host", "timeout", vmtest.Timeout, host, "rping", "-s", "-a", "10.77.0.1", "-v", "-C", "10"),
			in(1, rdmago+bin+" rping -c -a 10.77.0.1 -v -C 10"),
			"server ping data: rdma-ping-9", "ping data: rdma-ping-9"},
	} {
		t.Run(c.name, func(t *testing.T) { pair(t, c.server, c.client, c.serverWants, c.clientWants) })
	}
}

// TestInteropRdmacoreNVMeoF runs `rdmago nvmeof` built with the rdmacore
// tag in vm1, on the kernel's rxe0: as a host against Linux's NVMe/RDMA
// target in vm2, and as a target for Linux's NVMe/RDMA host in vm2.
func TestInteropRdmacoreNVMeoF(t *testing.T) {
	vm := vmtest.VM(t, "Linux's NVMe/RDMA host and target through the rdma-core provider")
	if out, err := exec.Command(vm, "exec", "2", "ibv_devices").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("rxe0")) {
		t.Skipf("vm2 is not up with rxe0 (vm up 2): %v\n%s", err, out)
	}
	const kernelNQN, goNQN = "nqn.2026-11.io.rdmago:vm2-target", "nqn.2026-11.io.rdmago:vm1-target"
	vmtest.LinuxNVMeTarget(t, vm, 2, "10.77.0.12", kernelNQN)
	bin := buildFor(t, vm, "rdmago-rdmacore", "github.com/rdmago/rdmago/cmd/rdmago", false)
	const rdmago = "RDMAGO_PROVIDER=rdmacore timeout " + vmtest.Timeout + " "
	in := func(n int, cmd string) (string, error) {
		out, err := exec.Command(vm, "exec", fmt.Sprint(n), cmd).CombinedOutput()
		return string(out), err
	}

	// The Go host in vm1 against the kernel's target in vm2.
	host := rdmago + bin + " nvmeof "
	script := "set -e; cd /tmp; head -c 1048576 /dev/urandom > nvp\n" +
		host + "discover -a 10.77.0.12\n" +
		host + "identify -a 10.77.0.12 -n " + kernelNQN + "\n" +
		host + "write -a 10.77.0.12 -n " + kernelNQN + " -N 2 -o 65536 < nvp\n" +
		host + "read -a 10.77.0.12 -n " + kernelNQN + " -N 2 -o 65536 -l 1048576 > nvb\n" +
		"cmp nvp nvb && echo read back the same\n" +
		host + "flush -a 10.77.0.12 -n " + kernelNQN + " -N 2 && echo flushed"
	out, err := in(1, script)
	if err != nil || !strings.Contains(out, "subnqn="+kernelNQN+" trtype=rdma") || !strings.Contains(out, "namespace 2: 67108864 bytes") ||
		!strings.Contains(out, "read back the same") || !strings.Contains(out, "flushed") {
		t.Fatalf("the Go host in vm1 against the kernel target in vm2: %v\n%s", err, out)
	}

	// The kernel's host in vm2 against the Go target in vm1.
	srv := exec.Command(vm, "exec", "1", "truncate -s 64M /tmp/nvgo.img; "+rdmago+bin+" nvmeof serve -a 10.77.0.11 -s 4421 -n "+goNQN+" -f /tmp/nvgo.img")
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		exec.Command(vm, "exec", "1", "pkill -INT -f 'nvmeof serve -a 10.77.0.11'").Run()
		srv.Wait()
		t.Logf("the Go target:\n%s", sout.String())
	}()
	kernel := `set -e
modprobe nvme-rdma
for i in $(seq 100); do echo transport=rdma,traddr=10.77.0.11,trsvcid=4421,nqn=` + goNQN + ` > /dev/nvme-fabrics 2>/dev/null && break; sleep 0.3; done
for c in /sys/class/nvme/nvme*; do grep -qx ` + goNQN + ` $c/subsysnqn && d=$(basename $c); done
trap 'echo 1 > /sys/class/nvme/$d/delete_controller' EXIT
for i in $(seq 50); do [ -b /dev/${d}n1 ] && break; sleep 0.1; done
echo size $(blockdev --getsize64 /dev/${d}n1)
head -c 1048576 /dev/urandom > /tmp/kp
dd if=/tmp/kp of=/dev/${d}n1 bs=128k seek=8 oflag=direct 2>/dev/null
dd if=/dev/${d}n1 of=/tmp/kb bs=128k count=8 skip=8 iflag=direct 2>/dev/null
cmp /tmp/kp /tmp/kb && echo read back the same`
	out, err = in(2, kernel)
	if err != nil || !strings.Contains(out, "size 67108864") || !strings.Contains(out, "read back the same") {
		t.Fatalf("the kernel host in vm2 against the Go target in vm1: %v\n%s", err, out)
	}
}
