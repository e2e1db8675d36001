package course

import "syscall"

// yieldCPU lets other threads run before a busy poll polls again
// (sched_yield). A NIC needs no CPU to deliver what the poll waits for;
// the software device's goroutines do, and on a machine with few cores a
// poll that never yields takes the CPU they need and slows every round
// trip to the scheduler's time slice. The poll still burns the CPU: the
// call returns at once when nothing else is runnable.
func yieldCPU() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
