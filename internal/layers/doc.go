// Package layers holds no code, only the tests that keep rdmago's layering
// (ARCHITECTURE.md): wire knows nothing of queue pairs or I/O, verbs knows
// nothing of UDP or of any provider, fabric knows none of its providers,
// the library takes from internal/ only leaf helpers (never a tool's
// engine), and nothing imports cmd. The tests read every package's
// imports both as built by default and with cgo and the rdmacore tag, so
// the rdma-core provider's files are checked too.
package layers
