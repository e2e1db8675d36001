package verbs

import (
	"strings"
	"testing"
)

// A program that imported no provider is told so, and how to import one,
// when it looks for a device.
func TestNoProviderHintNamesTheImport(t *testing.T) {
	providers.mu.Lock()
	saved := providers.list
	providers.list = nil
	providers.mu.Unlock()
	defer func() {
		providers.mu.Lock()
		providers.list = saved
		providers.mu.Unlock()
	}()
	if h := NoProviderHint(); !strings.Contains(h, `import _ "github.com/rdmago/rdmago/rxe"`) {
		t.Errorf("with no provider: hint %q", h)
	}
	t.Setenv("RDMAGO_PROVIDER", "rxe")
	if _, err := Devices(); err == nil || !strings.Contains(err.Error(), "none is registered") || !strings.Contains(err.Error(), "-tags rdmacore") {
		t.Errorf("RDMAGO_PROVIDER=rxe with no provider: %v", err)
	}
	providers.mu.Lock()
	providers.list = []Provider{namedProvider("rxe")}
	providers.mu.Unlock()
	if h := NoProviderHint(); h != "" {
		t.Errorf("with a provider: hint %q, want none", h)
	}
	t.Setenv("RDMAGO_PROVIDER", "rdmacore")
	if _, err := Devices(); err == nil || !strings.Contains(err.Error(), "registered: rxe") || !strings.Contains(err.Error(), "-tags rdmacore") {
		t.Errorf("RDMAGO_PROVIDER=rdmacore without it: %v", err)
	}
}

type namedProvider string

func (p namedProvider) Name() string                { return string(p) }
func (p namedProvider) Devices() ([]*Device, error) { return nil, nil }
