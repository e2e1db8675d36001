// Package racesync tells the race detector about the ordering RDMA gives.
//
// A software RDMA device reads and writes registered memory from its own
// goroutines, and the program learns that it did through a completion that
// may have travelled through a UDP socket: an ordering the race detector
// cannot see. Under the race detector, the device calls Sync after writing
// registered memory and before reading it, and the verbs layer calls it
// when a program posts work or polls completions, so the detector sees the
// ordering the RDMA semantics promise. Without the race detector Sync does
// nothing and costs nothing.
package racesync
