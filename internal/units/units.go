// Package units prints sizes and counts as rdma-core's and libfabric's
// example tools do (size_str and cnt_str of librdmacm/examples/common.c
// and of libfabric's pingpong), so that tables line up with theirs.
package units

import "fmt"

// Size is size_str: binary units (k, m, g) and, below ten of a unit, one
// truncated decimal when the size is not whole: 1536 is "1.5k", 2047
// "1.9k", 65536 "64k".
func Size(n int64) string {
	for _, u := range []struct {
		base int64
		suf  string
	}{{1 << 30, "g"}, {1 << 20, "m"}, {1 << 10, "k"}} {
		if n >= u.base {
			if frac := n % u.base * 10 / u.base; n/u.base < 10 && frac != 0 {
				return fmt.Sprintf("%d.%d%s", n/u.base, frac, u.suf)
			}
			return fmt.Sprintf("%d%s", n/u.base, u.suf)
		}
	}
	return fmt.Sprint(n)
}

// Count is cnt_str: decimal units (k, m, b), integer division.
func Count(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%db", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%dm", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprint(n)
}
