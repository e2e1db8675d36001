//go:build race

package perftest

// raceEnabled: the race detector watches this test binary. ib_write_lat
// reads memory the software device's goroutines write by RDMA, without
// synchronization (as a C program reads what a NIC writes), which the
// detector reports; .ci/run runs that test without it.
const raceEnabled = true
