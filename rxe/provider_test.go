package rxe

import (
	"strings"
	"testing"
)

// RDMAGO_RXE_ADDR naming an address the host does not have is an error
// naming it, not an empty device list.
func TestEnvAddrNamingAForeignAddressIsAnError(t *testing.T) {
	t.Setenv(EnvAddr, "127.0.0.1,192.0.2.77")
	_, err := provider{}.Devices()
	if err == nil || !strings.Contains(err.Error(), "192.0.2.77") || !strings.Contains(err.Error(), EnvAddr) {
		t.Fatalf("Devices() error %v, want one naming 192.0.2.77 and %s", err, EnvAddr)
	}
	t.Setenv(EnvAddr, "127.0.0.9") // inside lo's 127.0.0.0/8
	devs, err := provider{}.Devices()
	if err != nil || len(devs) != 1 {
		t.Fatalf("Devices() = %d devices, %v; want rxe_lo", len(devs), err)
	}
}
