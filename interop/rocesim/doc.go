// Package rocesim runs roce-sim (github.com/datenlord/roce-sim), a RoCEv2
// conformance framework, with rdmago as its device under test. The device
// side is package dut, served over gRPC by cmd/rocesim-dut; run.sh sets up
// the network, the simulator and the manager, runs every case and prints
// one line per case. The test of this package runs run.sh on the roce-sim
// work tree that ROCESIM_DIR names, and skips without it.
package rocesim
