package verbs

import "fmt"

// Progress says which goroutines move a software device's data: its own
// (ProgressAuto) or the program's, each time it posts work or polls a CQ
// (ProgressManual). The names are libfabric's (FI_PROGRESS_AUTO and
// FI_PROGRESS_MANUAL): libibverbs has no such setting because a hardware
// device moves the data itself, and on one (rdma-core) both behave alike.
type Progress uint8

const (
	// ProgressAuto, the default, leaves all transport work to the
	// device's goroutines. A program waiting for a completion (CQ.Wait, a
	// completion channel) uses no CPU, and a busy poll does not help: each
	// message still waits for the device's goroutines to be scheduled.
	ProgressAuto Progress = iota
	// ProgressManual makes the goroutine that posts a work request send
	// it at once, and a CQ.Poll that finds the CQ
	// empty take the packets waiting on the network and run the QPs they
	// are for before it returns, as libfabric's manual progress and as a
	// poll of hardware would see them. A program that busy-polls then
	// needs no goroutine switch per message, which is what its latency
	// is made of. The device's goroutines still do the work nobody polls
	// for (retransmits, a QP whose CQ nobody polls), so a program that
	// waits instead of polling works as under ProgressAuto; while polls
	// come, they leave the network to the pollers, and take it back half
	// a millisecond after the polls stop. A program that waits for
	// something other than a completion (an RDMA WRITE landing in its
	// memory) polls with no room, CQ.Poll(nil), to drive the device. An
	// ACK a poll brings about waits for the QP's next send, up to 50 µs,
	// to go out with it; destroying the QP sends it at once.
	ProgressManual
)

func (p Progress) String() string {
	switch p {
	case ProgressAuto:
		return "auto"
	case ProgressManual:
		return "manual"
	}
	return fmt.Sprintf("Progress(%d)", uint8(p))
}

// SetProgress chooses who moves the data of this context's QPs and CQs
// (see Progress); it may be called at any time. The C verbs have no
// counterpart: it is libfabric's domain attribute data_progress.
func (c *Context) SetProgress(p Progress) error {
	if err := c.check("set_progress"); err != nil {
		return err
	}
	if p != ProgressAuto && p != ProgressManual {
		return Errorf("set_progress", ErrInvalidArgument, "unknown progress mode "+p.String()+" (want ProgressAuto or ProgressManual)")
	}
	if d, ok := c.drv.(ProgressDriver); ok {
		return d.SetProgress(p)
	}
	return nil
}
