//go:build !race

package rdmacm_test

// floodCount is how many packets of each kind the flood test sends.
const floodCount = 100_000
