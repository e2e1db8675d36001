//go:build !linux

// Package yield lets other threads run between the polls of a busy poll.
package yield

import "runtime"

// CPU lets other goroutines run before a busy poll polls again (see
// yield_linux.go).
func CPU() { runtime.Gosched() }
