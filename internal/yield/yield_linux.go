// Package yield lets other threads run between the polls of a busy poll.
package yield

import "syscall"

// CPU lets other threads run before a busy poll polls again
// (sched_yield). A NIC needs no CPU to deliver what the poll waits for;
// the software device's goroutines may (those of a process sharing the
// device's address, the one that forwards its packets, a timer), and on a
// machine with few cores a poll that never yields takes the CPU they need
// and slows a round trip to the scheduler's time slice, milliseconds. The
// poll still burns the CPU: the call returns at once when nothing else is
// runnable.
func CPU() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
