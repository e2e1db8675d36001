package nvmeoftool

import (
	"bytes"
	"crypto/md5"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// The interop tests run against Linux 6.1 in vm1 of the Soft-RoCE
// harness: its NVMe/RDMA target (nvmet-rdma, set up through configfs)
// and its NVMe/RDMA host (nvme-rdma, through /dev/nvme-fabrics), with
// rdmago's host and target on the harness's host side (10.77.0.1).

const linuxNQN = "nqn.2026-11.io.rdmago:linux-target"

// host runs `rdmago nvmeof args...` on the host side with stdin, and
// returns its standard output.
func host(t *testing.T, vm, bin string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := vmtest.Host(vm, bin, "nvmeof", args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rdmago nvmeof %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func TestInteropGoHostAgainstLinuxTarget(t *testing.T) {
	vm := vmtest.VM(t, "Linux's nvmet-rdma")
	vmtest.LinuxNVMeTarget(t, vm, 1, "10.77.0.11", linuxNQN)
	bin := vmtest.BuildRdmago(t)
	disc := string(host(t, vm, bin, nil, "discover", "-a", "10.77.0.11"))
	if !strings.Contains(disc, "subnqn="+linuxNQN+" trtype=rdma adrfam=ipv4 traddr=10.77.0.11 trsvcid=4420 subtype=nvme") {
		t.Fatalf("discover:\n%s", disc)
	}
	id := string(host(t, vm, bin, nil, "identify", "-a", "10.77.0.11", "-n", linuxNQN))
	if !strings.Contains(id, "model     Linux") || !strings.Contains(id, "namespace 2: 67108864 bytes") {
		t.Fatalf("identify:\n%s", id)
	}
	for _, n := range []int{4 << 10, 128 << 10, 1 << 20} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*13 + n>>10)
		}
		off := fmt.Sprint(3 << 20)
		host(t, vm, bin, p, "write", "-a", "10.77.0.11", "-n", linuxNQN, "-N", "2", "-o", off)
		got := host(t, vm, bin, nil, "read", "-a", "10.77.0.11", "-n", linuxNQN, "-N", "2", "-o", off, "-l", fmt.Sprint(n))
		if !bytes.Equal(got, p) {
			t.Fatalf("%d bytes written to the file namespace read back differently", n)
		}
		// null_blk keeps nothing and reads zeros.
		host(t, vm, bin, p, "write", "-a", "10.77.0.11", "-n", linuxNQN, "-N", "1", "-o", off)
		got = host(t, vm, bin, nil, "read", "-a", "10.77.0.11", "-n", linuxNQN, "-N", "1", "-o", off, "-l", fmt.Sprint(n))
		if !bytes.Equal(got, make([]byte, n)) {
			t.Fatalf("%d bytes read from null_blk are not zeros", n)
		}
	}
	// The bytes are in the kernel target's file.
	out, err := exec.Command(vm, "exec", "1", "dd if=/tmp/nvmet-ns2.img bs=1M skip=3 count=1 2>/dev/null | md5sum").Output()
	p := make([]byte, 1<<20)
	for i := range p {
		p[i] = byte(i*13 + 1024)
	}
	if sum := fmt.Sprintf("%x", md5.Sum(p)); err != nil || !strings.HasPrefix(string(out), sum) {
		t.Fatalf("the target's file holds %q (%v), want %s", out, err, sum)
	}
	host(t, vm, bin, nil, "flush", "-a", "10.77.0.11", "-n", linuxNQN, "-N", "2")
}

func TestInteropLinuxHostAgainstGoTarget(t *testing.T) {
	vm := vmtest.VM(t, "Linux's nvme-rdma")
	bin := vmtest.BuildRdmago(t)
	const nqn = "nqn.2026-11.io.rdmago:go-target"
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 128<<20); err != nil {
		t.Fatal(err)
	}
	srv := vmtest.Host(vm, bin, "nvmeof", "serve", "-a", "10.77.0.1", "-n", nqn, "-f", img, "-m", "32m")
	out := vmtest.NewReadyBuffer("serving")
	srv.Stdout, srv.Stderr = out, out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srv.WaitDelay = 10 * time.Second
	defer func() {
		// The target runs in the harness's network namespace, under the
		// harness's script: interrupt it where it runs (Ctrl-C, which it
		// answers by disconnecting everyone and exiting 0).
		exec.Command("pkill", "-INT", "-f", "nvmeof serve -a 10.77.0.1 -n "+nqn).Run()
		if err := srv.Wait(); err != nil {
			t.Errorf("the target, interrupted: %v", err)
		}
		t.Logf("target:\n%s", out)
	}()
	select {
	case <-out.Ready:
	case <-time.After(30 * time.Second):
		t.Fatalf("the target did not start:\n%s", out)
	}
	// The kernel host connects, writes a pattern with O_DIRECT in 4 KiB,
	// 128 KiB and 1 MiB blocks and reads it back, reports the namespaces'
	// sizes, makes a file system on the memory namespace and mounts it, and
	// disconnects.
	script := `set -e
modprobe nvme-rdma
echo transport=rdma,traddr=10.77.0.1,trsvcid=4420,nqn=` + nqn + ` > /dev/nvme-fabrics
for c in /sys/class/nvme/nvme*; do grep -qx ` + nqn + ` $c/subsysnqn && d=$(basename $c); done
trap 'echo 1 > /sys/class/nvme/$d/delete_controller' EXIT
for i in $(seq 50); do [ -b /dev/${d}n2 ] && break; sleep 0.1; done
echo size1 $(blockdev --getsize64 /dev/${d}n1) size2 $(blockdev --getsize64 /dev/${d}n2)
for spec in 4k:256 128k:16 1M:4; do
  bs=${spec%:*}; n=${spec#*:}
  for ns in n1 n2; do
    dd if=/dev/urandom of=/tmp/p bs=$bs count=$n 2>/dev/null
    dd if=/tmp/p of=/dev/${d}$ns bs=$bs count=$n seek=1 oflag=direct 2>/dev/null
    dd if=/dev/${d}$ns of=/tmp/b bs=$bs count=$n skip=1 iflag=direct 2>/dev/null
    cmp /tmp/p /tmp/b && echo same $ns bs=$bs
  done
done
head -c 1048576 /dev/urandom > /tmp/last
dd if=/tmp/last of=/dev/${d}n1 bs=1M seek=100 oflag=direct 2>/dev/null
echo last $(md5sum < /tmp/last)
mkfs.ext4 -q -F /dev/${d}n2
mkdir -p /mnt/nvmeof-test; mount /dev/${d}n2 /mnt/nvmeof-test
echo written > /mnt/nvmeof-test/f; umount /mnt/nvmeof-test
mount /dev/${d}n2 /mnt/nvmeof-test; echo read back $(cat /mnt/nvmeof-test/f); umount /mnt/nvmeof-test`
	res, err := exec.Command(vm, "exec", "1", "timeout "+vmtest.Timeout+" sh -c '"+strings.ReplaceAll(script, "'", `'\''`)+"'").CombinedOutput()
	text := string(res)
	if err != nil {
		t.Fatalf("the kernel host: %v\n%s", err, text)
	}
	for _, want := range []string{"size1 134217728 size2 33554432", "read back written"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the kernel host's output:\n%s", want, text)
		}
	}
	for _, bs := range []string{"4k", "128k", "1M"} {
		for _, ns := range []string{"n1", "n2"} {
			if !strings.Contains(text, "same "+ns+" bs="+bs) {
				t.Errorf("%s with %s blocks did not read back the same:\n%s", ns, bs, text)
			}
		}
	}
	// What the kernel wrote at 100 MiB of namespace 1 is in the file.
	f, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("last %x", md5.Sum(f[100<<20:101<<20]))
	if !strings.Contains(text, sum) {
		t.Errorf("the file holds %s at 100 MiB; the kernel host said:\n%s", sum, text)
	}
}
