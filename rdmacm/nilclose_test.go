package rdmacm

import (
	"errors"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// A Conn or Listener that Dial, Accept or Listen did not make says so
// when closed rather than panicking.
func TestCloseOfAConnOrListenerNeverMadeFails(t *testing.T) {
	for _, c := range []struct {
		name  string
		close func() error
	}{
		{"nil Conn", (*Conn)(nil).Close},
		{"zero Conn", (&Conn{}).Close},
		{"nil Listener", (*Listener)(nil).Close},
		{"zero Listener", (&Listener{}).Close},
	} {
		if err := c.close(); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("%s: Close = %v, want an error wrapping verbs.ErrInvalidArgument", c.name, err)
		}
	}
}
