package sockets_test

import (
	"context"
	"testing"

	"github.com/rdmago/rdmago/fabric"
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

// The API's calls on RDM and datagram endpoints.
func TestFabricAPIConnectionless(t *testing.T) {
	for _, typ := range []fabric.EPType{fabric.EPRDM, fabric.EPDgram} {
		t.Run(typ.String(), func(t *testing.T) {
			fabrictest.RunConnectionless(t, fabrictest.Connectionless{Name: "sockets", Entry: "sockets", Type: typ, Tagged: true, Source: true})
		})
	}
}
