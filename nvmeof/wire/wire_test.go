package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rdmago/rdmago/nvmeof/wire"
)

func TestBuildersFillTheFieldsTheSpecNames(t *testing.T) {
	for _, c := range []struct {
		name  string
		cmd   wire.Command
		check func(wire.Command) bool
	}{
		{"Connect", wire.NewConnect(7, 1, 127, 15000, wire.InCapsule(0, 1024)), func(c wire.Command) bool {
			return c.Opcode == wire.OpFabrics && c.FCType == wire.FCTypeConnect && c.ConnectQID() == 1 &&
				c.ConnectSQSize() == 127 && c.ConnectKATO() == 15000 && c.SGL.Length == 1024
		}},
		{"Property Get CAP", wire.NewPropertyGet(8, wire.PropCAP, 8), func(c wire.Command) bool {
			return c.FCType == wire.FCTypePropertyGet && c.PropertySize() == 8 && c.PropertyOffset() == wire.PropCAP
		}},
		{"Property Set CC", wire.NewPropertySet(9, wire.PropCC, 4, 0x460001), func(c wire.Command) bool {
			return c.FCType == wire.FCTypePropertySet && c.PropertySize() == 4 && c.PropertyValue() == 0x460001
		}},
		{"Read", wire.NewIO(wire.NVMRead, 10, 1, 1<<33+5, 16, wire.Keyed(0x1000, 8192, 0xabc, true)), func(c wire.Command) bool {
			return c.NSID == 1 && c.SLBA() == 1<<33+5 && c.NLB() == 16 && c.SGL.Subtype == wire.SGLInvalidate && c.SGL.Key == 0xabc
		}},
	} {
		var b [wire.CommandLen]byte
		c.cmd.Put(b[:])
		got, err := wire.ParseCommand(b[:])
		if err != nil || got != c.cmd || !c.check(got) {
			t.Errorf("%s: %+v read back as %+v (%v)", c.name, c.cmd, got, err)
		}
	}
}

func TestShortBuffersAreRefused(t *testing.T) {
	for name, err := range map[string]error{
		"command":      func() error { _, err := wire.ParseCommand(make([]byte, 63)); return err }(),
		"completion":   func() error { _, err := wire.ParseCompletion(make([]byte, 15)); return err }(),
		"connect data": func() error { _, err := wire.ParseConnectData(make([]byte, 1023)); return err }(),
		"CM request":   func() error { _, err := wire.ParseCMReq(make([]byte, 31)); return err }(),
		"CM reject":    func() error { _, err := wire.ParseCMRej(make([]byte, 3)); return err }(),
	} {
		if !errors.Is(err, wire.ErrShort) {
			t.Errorf("%s: %v, want ErrShort", name, err)
		}
	}
}

func TestCompletionStatus(t *testing.T) {
	// Status code 0x02 (Invalid Field), type 1, phase 1, Do Not Retry.
	c := wire.Completion{CID: 3, Status: 1<<15 | 1<<9 | 0x02<<1 | 1}
	var b [wire.CompletionLen]byte
	c.Put(b[:])
	got, _ := wire.ParseCompletion(b[:])
	if got != c || got.OK() || got.StatusCode() != 0x02 || got.StatusType() != 1 {
		t.Fatalf("%+v: ok %v, code %#x, type %d", got, got.OK(), got.StatusCode(), got.StatusType())
	}
	if ok := (wire.Completion{Status: 1}); !ok.OK() {
		t.Fatal("a success with the phase tag set reads as a failure")
	}
}

// FuzzParseCommand: any 64 bytes read as a command that writes back to
// them, apart from what the format does not keep (a Fabrics command's
// bytes 5-7, reserved bytes, a keyed descriptor's unused byte).
func FuzzParseCommand(f *testing.F) {
	for _, c := range []wire.Command{wire.NewConnect(1, 0, 31, 0, wire.Keyed(0xffff8000, 1024, 0x1234, true)),
		wire.NewIO(wire.NVMWrite, 2, 1, 99, 8, wire.InCapsule(0, 4096))} {
		var b [wire.CommandLen]byte
		c.Put(b[:])
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := wire.ParseCommand(b)
		if err != nil {
			if len(b) >= wire.CommandLen {
				t.Fatalf("%d bytes refused: %v", len(b), err)
			}
			return
		}
		var out [wire.CommandLen]byte
		c.Put(out[:])
		again, err := wire.ParseCommand(out[:])
		if err != nil || again != c {
			t.Fatalf("%+v writes back as one that reads %+v (%v)", c, again, err)
		}
	})
}

// FuzzParseCMPrivateData: any private data of a request, accept or reject
// reads without panicking, and what is read writes back as it was.
func FuzzParseCMPrivateData(f *testing.F) {
	f.Add(wire.CMReq{HRQSize: 32, HSQSize: 31}.Bytes())
	f.Add(wire.CMRep{CRQSize: 32}.Bytes())
	f.Add(wire.CMRej{Status: wire.RejInvalidQID}.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := wire.ParseCMReq(b); err == nil && !bytes.Equal(r.Bytes()[:10], b[:10]) {
			t.Fatalf("request %+v writes back as % x, was % x", r, r.Bytes()[:10], b[:10])
		}
		if r, err := wire.ParseCMRep(b); err == nil && !bytes.Equal(r.Bytes()[:4], b[:4]) {
			t.Fatalf("accept %+v writes back differently", r)
		}
		if r, err := wire.ParseCMRej(b); err == nil && !bytes.Equal(r.Bytes(), b[:4]) {
			t.Fatalf("reject %+v writes back differently", r)
		}
		if d, err := wire.ParseConnectData(b); err == nil {
			var out [wire.ConnectDataLen]byte
			d.Put(out[:])
			if again, _ := wire.ParseConnectData(out[:]); again != d {
				t.Fatalf("Connect data %+v writes back as %+v", d, again)
			}
		}
	})
}
