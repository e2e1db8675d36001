package demo

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestRunPlaysTheRCExampleFlow(t *testing.T) {
	var out bytes.Buffer
	var err error
	for try := 0; try < 5; try++ { // a random port may be taken
		out.Reset()
		err = Run(context.Background(), &out, Options{Port: uint16(20000 + rand.IntN(20000)), BWSize: 256 << 10, BWTime: 100 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		`[client] received 64 bytes by SEND: "SEND operation "`,
		`[client] RDMA READ of the server's buffer: "RDMA read operation "`,
		`[server] buffer after the client's RDMA WRITE: "RDMA write operation"`,
		`[client] ATOMIC FETCH_AND_ADD +2: the counter was 40`,
		`[client] ATOMIC CMP_AND_SWP 42 -> 1000: the counter was 42`,
		`[server] counter after the client's atomics: 1000`,
		`[client] RDMA WRITE bandwidth: `,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
