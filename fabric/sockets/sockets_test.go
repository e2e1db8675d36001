package sockets_test

import (
	"context"
	"testing"

	"github.com/rdmago/rdmago/fabric/fabrictest"
	_ "github.com/rdmago/rdmago/fabric/sockets"
)

// The API's calls on connected FI_EP_MSG endpoints, as every provider
// runs them: the sockets provider has tagged messages and atomics.
func TestFabricAPI(t *testing.T) {
	fabrictest.Run(t, fabrictest.Provider{Name: "sockets", CMDataSize: 256, Tagged: true, Atomics: true})
}

func contextTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), fabrictest.Timeout)
}
