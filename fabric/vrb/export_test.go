package vrb

import (
	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/unwrap"
)

// Vanish leaves fep's peer what a killed process leaves it: its QP is
// gone, and no disconnect request is sent.
func Vanish(fep *fabric.Endpoint) {
	e := unwrap.Endpoint(fep).(*ep)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state = stShutdown // (so that Close sends no DREQ either)
	e.id.DestroyQP()
	e.qp = nil
}

// SetConnRetryCount makes the endpoints connected from now on ask for n
// transport retries; the returned func restores the default.
func SetConnRetryCount(n uint8) (restore func()) {
	connRetryCount = n
	return func() { connRetryCount = defaultConnRetryCount }
}
