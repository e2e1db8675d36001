package units

import "testing"

func TestSizeAndCountPrintAsCommonCDoes(t *testing.T) {
	for _, tc := range []struct {
		n           int64
		size, count string
	}{
		{0, "0", "0"},
		{64, "64", "64"},
		{192, "192", "192"},
		{1000, "1000", "1k"},
		{1024, "1k", "1k"},
		{1536, "1.5k", "1k"},
		{2047, "1.9k", "2k"}, // truncated, not rounded
		{10 << 10, "10k", "10k"},
		{12800000, "12m", "12m"},
		{6553600, "6.2m", "6m"},
		{1 << 30, "1g", "1b"},
		{3 << 29, "1.5g", "1b"},
	} {
		if got := Size(tc.n); got != tc.size {
			t.Errorf("Size(%d) = %q, want %q", tc.n, got, tc.size)
		}
		if got := Count(tc.n); got != tc.count {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.count)
		}
	}
}
