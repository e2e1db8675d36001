package statvar_test

import (
	"encoding/json"
	"expvar"
	"testing"

	_ "github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/verbs/statvar"
)

func TestPublishesEveryDevicesCounters(t *testing.T) {
	t.Setenv("RDMAGO_RXE_ADDR", "127.0.0.1")
	v := expvar.Get(statvar.Name)
	if v == nil {
		t.Fatal("not published")
	}
	var got map[string]map[string]uint64
	if err := json.Unmarshal([]byte(v.String()), &got); err != nil {
		t.Fatalf("%v: %s", err, v.String())
	}
	c, ok := got["rxe_lo"]
	if !ok {
		t.Fatalf("no rxe_lo in %s", v.String())
	}
	if _, ok := c["sent_pkts"]; !ok || len(c) != 15 {
		t.Errorf("rxe_lo's counters: %v", c)
	}
}
