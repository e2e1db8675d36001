//go:build race

package rdmacm_test

// floodCount is how many packets of each kind the flood test sends: fewer
// under the race detector, which slows the device tenfold.
const floodCount = 10_000
