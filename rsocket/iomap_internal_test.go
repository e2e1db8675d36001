package rsocket

import (
	"encoding/binary"
	"testing"
)

func TestIOMapSizeIsRoundedAsRsocketsRoundsIt(t *testing.T) {
	for _, tc := range []struct{ in, want int }{
		{0, 0}, {-5, 0}, {1, 1}, {128, 128}, {129, 128}, {256, 256}, {300, 256}, {511, 256}, {512, 512},
		{MaxIOMapSize, MaxIOMapSize}, {MaxIOMapSize + 1, MaxIOMapSize}, {1 << 20, MaxIOMapSize},
	} {
		cfg := Config{IOMapSize: tc.in}
		if got := cfg.iomapSize(); got != tc.want {
			t.Errorf("IOMapSize %d: %d entries, want %d", tc.in, got, tc.want)
		}
	}
}

func FuzzIOMapEntry(f *testing.F) {
	f.Add(make([]byte, 24), false)
	f.Add([]byte{1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, b []byte, be bool) {
		var o binary.ByteOrder = binary.LittleEndian
		if be {
			o = binary.BigEndian
		}
		e, err := ParseIOMapEntry(o, b)
		if err != nil {
			if len(b) >= iomapLen {
				t.Fatalf("%d bytes refused: %v", len(b), err)
			}
			return
		}
		out := make([]byte, iomapLen)
		PutIOMapEntry(o, out, e)
		if string(out) != string(b[:iomapLen]) {
			t.Fatalf("%x parsed to %+v, marshals to %x", b[:iomapLen], e, out)
		}
	})
}

func FuzzIOMapScale(f *testing.F) {
	f.Add(uint8(0))
	f.Add(uint8(200))
	f.Fuzz(func(t *testing.T, s uint8) {
		v := scaleToValue(s)
		if v < 0 || v > MaxIOMapSize {
			t.Fatalf("scale %d reads as %d", s, v)
		}
		if s <= 128 || s&0x7f != 0 {
			if back := scaleToValue(valueToScale(v)); back != v {
				t.Fatalf("scale %d: %d, then %d", s, v, back)
			}
		}
	})
}
