package vmtest

import (
	"net"
	"strconv"
	"testing"
)

// FreeUDPPort returns a UDP port free on both a and b, the addresses of
// two software devices of a test on loopback (127.0.0.2 and 127.0.0.1).
// It skips the test if a cannot be used.
func FreeUDPPort(t *testing.T, a, b string) string {
	t.Helper()
	for range 20 {
		pa, err := net.ListenPacket("udp", net.JoinHostPort(a, "0"))
		if err != nil {
			t.Skipf("cannot use %s (add it to the loopback interface): %v", a, err)
		}
		port := pa.LocalAddr().(*net.UDPAddr).Port
		pb, err := net.ListenPacket("udp", net.JoinHostPort(b, strconv.Itoa(port)))
		pa.Close()
		if err == nil {
			pb.Close()
			return strconv.Itoa(port)
		}
	}
	t.Fatalf("no UDP port free on both %s and %s", a, b)
	return ""
}
