package verbs_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// listProvider is a provider with fixed devices.
type listProvider struct {
	name string
	devs []*verbs.Device
}

func (p listProvider) Name() string                      { return p.name }
func (p listProvider) Devices() ([]*verbs.Device, error) { return p.devs, nil }

// registerTestProviders registers the test's two providers once: a
// registration lasts for the process, and -count runs the test again.
var registerTestProviders = sync.OnceFunc(func() {
	verbs.RegisterProvider(listProvider{"ptest_a", []*verbs.Device{verbs.NewDevice("ptest_a0", 1, cqDevice{})}})
	verbs.RegisterProvider(listProvider{"ptest_b", []*verbs.Device{verbs.NewDevice("ptest_b0", 2, cqDevice{})}})
})

func TestRDMAGOProviderPicksTheProvidersListed(t *testing.T) {
	registerTestProviders()
	for _, c := range []struct {
		env  string
		want []string
	}{
		{"ptest_a", []string{"ptest_a0"}},
		{"ptest_b", []string{"ptest_b0"}},
		{"ptest_b,ptest_a", []string{"ptest_a0", "ptest_b0"}},
	} {
		t.Setenv("RDMAGO_PROVIDER", c.env)
		devs, err := verbs.Devices()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range devs {
			got = append(got, d.Name())
		}
		if len(got) != len(c.want) || len(got) > 0 && (got[0] != c.want[0] || got[len(got)-1] != c.want[len(c.want)-1]) {
			t.Errorf("RDMAGO_PROVIDER=%s: devices %v, want %v", c.env, got, c.want)
		}
	}
	// A list that names no registered provider is a mistake, not a host
	// without devices: the error says which providers there are.
	t.Setenv("RDMAGO_PROVIDER", "nosuch")
	if devs, err := verbs.Devices(); !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "ptest_a, ptest_b") || len(devs) != 0 {
		t.Errorf("RDMAGO_PROVIDER=nosuch: devices %v, error %v; want ErrNoDevice naming the registered providers", devs, err)
	}
	t.Setenv("RDMAGO_PROVIDER", "")
	devs, _ := verbs.Devices()
	n := 0
	for _, d := range devs {
		if d.Name() == "ptest_a0" || d.Name() == "ptest_b0" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("without RDMAGO_PROVIDER, %d of the 2 test devices are listed", n)
	}
}

// forkProvider counts its ForkInit calls.
type forkProvider struct {
	listProvider
	calls *int
}

func (f forkProvider) ForkInit() error { *f.calls++; return nil }

func TestForkInitReachesProvidersThatNeedIt(t *testing.T) {
	calls := 0
	verbs.RegisterProvider(forkProvider{listProvider{"ptest_fork", nil}, &calls})
	if err := verbs.ForkInit(); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("ForkInit reached the provider %d times, want 1", calls)
	}
}
