package verbs

import (
	"github.com/rdmago/rdmago/internal/racesync"
)

// CreateCQWCFlags say which fields of a completion an extended CQ
// provides (enum ibv_create_cq_wc_flags; CQInitAttrEx.WCFlags).
type CreateCQWCFlags uint64

// Completion fields an extended CQ can be asked for.
const (
	WCExWithByteLen                      CreateCQWCFlags = 1 << 0  // IBV_WC_EX_WITH_BYTE_LEN
	WCExWithImm                          CreateCQWCFlags = 1 << 1  // IBV_WC_EX_WITH_IMM (the immediate, or the invalidated rkey)
	WCExWithQPNum                        CreateCQWCFlags = 1 << 2  // IBV_WC_EX_WITH_QP_NUM
	WCExWithSrcQP                        CreateCQWCFlags = 1 << 3  // IBV_WC_EX_WITH_SRC_QP
	WCExWithSLID                         CreateCQWCFlags = 1 << 4  // IBV_WC_EX_WITH_SLID
	WCExWithSL                           CreateCQWCFlags = 1 << 5  // IBV_WC_EX_WITH_SL
	WCExWithDLIDPathBits                 CreateCQWCFlags = 1 << 6  // IBV_WC_EX_WITH_DLID_PATH_BITS
	WCExWithCompletionTimestamp          CreateCQWCFlags = 1 << 7  // IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: the device's clock
	WCExWithCVLAN                        CreateCQWCFlags = 1 << 8  // IBV_WC_EX_WITH_CVLAN
	WCExWithFlowTag                      CreateCQWCFlags = 1 << 9  // IBV_WC_EX_WITH_FLOW_TAG
	WCExWithTMInfo                       CreateCQWCFlags = 1 << 10 // IBV_WC_EX_WITH_TM_INFO
	WCExWithCompletionTimestampWallclock CreateCQWCFlags = 1 << 11 // IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK

	// WCStandardFlags are the fields of struct ibv_wc
	// (IBV_WC_STANDARD_FLAGS): every provider offers them.
	WCStandardFlags = WCExWithByteLen | WCExWithImm | WCExWithQPNum | WCExWithSrcQP | WCExWithSLID | WCExWithSL | WCExWithDLIDPathBits
	// CreateCQSupWCFlags are all the flags libibverbs defines
	// (IBV_CREATE_CQ_SUP_WC_FLAGS); which of them a device provides
	// beyond WCStandardFlags is its own matter.
	CreateCQSupWCFlags = WCStandardFlags | WCExWithCompletionTimestamp | WCExWithCVLAN | WCExWithFlowTag | WCExWithTMInfo | WCExWithCompletionTimestampWallclock
)

// CQInitAttrMask says which optional fields of CQInitAttrEx count (enum
// ibv_cq_init_attr_mask).
type CQInitAttrMask uint32

// CQInitAttrEx.CompMask bits.
const (
	CQInitAttrMaskFlags CQInitAttrMask = 1 << 0 // IBV_CQ_INIT_ATTR_MASK_FLAGS: Flags counts
	CQInitAttrMaskPD    CQInitAttrMask = 1 << 1 // IBV_CQ_INIT_ATTR_MASK_PD: a parent domain (not supported)
)

// CreateCQAttrFlags are the creation flags of an extended CQ (enum
// ibv_create_cq_attr_flags).
type CreateCQAttrFlags uint32

// Extended CQ creation flags.
const (
	// CreateCQAttrSingleThreaded promises that one thread uses the CQ.
	// It is a hint that changes nothing here.
	CreateCQAttrSingleThreaded CreateCQAttrFlags = 1 << 0 // IBV_CREATE_CQ_ATTR_SINGLE_THREADED
	// CreateCQAttrIgnoreOverrun asks for a CQ that overwrites instead
	// of failing when it overruns; the software device does not do it.
	CreateCQAttrIgnoreOverrun CreateCQAttrFlags = 1 << 1 // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN
)

// CQInitAttrEx describes an extended completion queue to create (struct
// ibv_cq_init_attr_ex). The parent domain of C's attributes is not
// supported: CompMask must not have CQInitAttrMaskPD.
type CQInitAttrEx struct {
	CQE        int          // at least this many entries
	CQContext  any          // cq_context: CQ.CQContext returns it
	Channel    *CompChannel // may be nil
	CompVector int          // from 0 to Context.NumCompVectors()-1
	// WCFlags are the completion fields the CQ must provide.
	WCFlags  CreateCQWCFlags
	CompMask CQInitAttrMask
	Flags    CreateCQAttrFlags // with CQInitAttrMaskFlags
}

// PollCQAttr is the argument of StartPoll (struct ibv_poll_cq_attr):
// CompMask is for extensions, none are defined, so it must be 0.
type PollCQAttr struct {
	CompMask uint32
}

// WCEx is one completion as an extended CQ's provider hands it over: the
// work completion and the timestamps the CQ was asked for. Programs read
// it through CQEx's methods.
type WCEx struct {
	WC
	// CompletionTS is when the device completed the work, in ticks of
	// its clock (DeviceAttrEx.HCACoreClock kHz).
	CompletionTS uint64
	// CompletionWallclockNS is the same moment in nanoseconds since the
	// Unix epoch.
	CompletionWallclockNS uint64
}

// CQEx is an extended completion queue (struct ibv_cq_ex): completions
// are read one at a time, in place, between StartPoll and EndPoll, with
// the Read methods for the fields the CQ was created with.
//
// CQEx embeds its plain CQ: cq.CQ is ibv_cq_ex_to_cq(cq), what QPs are
// created with, and the CQ's methods (Poll, Wait, ReqNotify, Destroy ...)
// work on it as on any CQ.
//
// A CQEx's polling state is the caller's: one goroutine polls it at a
// time, as in C.
type CQEx struct {
	*CQ
	// WRID and Status are the current completion's wr_id and status
	// (ibv_cq_ex's wr_id and status), set by StartPoll and NextPoll.
	WRID   uint64
	Status WCStatus

	ex      CQExDriver
	wcFlags CreateCQWCFlags
	cur     WCEx
	polling bool
}

// Errors an empty CQ returns, made once so that polling one allocates
// nothing.
var (
	errStartPollEmpty error = &Error{Op: "ibv_start_poll", Errno: ErrNoEntry, Detail: "no completion queued"}
	errNextPollEmpty  error = &Error{Op: "ibv_next_poll", Errno: ErrNoEntry, Detail: "no completion queued"}
)

// CreateCQEx creates an extended completion queue (ibv_create_cq_ex).
// Asking for a completion field the device cannot provide
// (attr.WCFlags), a flag it does not have or a parent domain fails with
// ErrNotSupported, as in C.
func (c *Context) CreateCQEx(attr *CQInitAttrEx) (*CQEx, error) {
	const op = "ibv_create_cq_ex"
	if attr == nil {
		return nil, Errorf(op, ErrInvalidArgument, "no attributes")
	}
	switch {
	case attr.CompMask&^(CQInitAttrMaskFlags|CQInitAttrMaskPD) != 0:
		return nil, Errorf(op, ErrNotSupported, "comp_mask has unknown bits")
	case attr.CompMask&CQInitAttrMaskPD != 0:
		return nil, Errorf(op, ErrNotSupported, "parent domains (IBV_CQ_INIT_ATTR_MASK_PD)")
	case attr.WCFlags&^CreateCQSupWCFlags != 0:
		return nil, Errorf(op, ErrNotSupported, "wc_flags has unknown bits")
	}
	a := *attr
	if a.CompMask&CQInitAttrMaskFlags == 0 {
		a.Flags = 0
	}
	if a.Flags&^(CreateCQAttrSingleThreaded|CreateCQAttrIgnoreOverrun) != 0 {
		return nil, Errorf(op, ErrNotSupported, "flags has unknown bits")
	}
	var ex CQExDriver
	cq, err := c.createCQ(op, a.CQE, a.Channel, a.CompVector, func(notify func()) (CQDriver, error) {
		if x, ok := c.drv.(CQExCreator); ok {
			d, err := x.CreateCQEx(&a, notify)
			if err != nil {
				return nil, err
			}
			ex = d
			return d, nil
		}
		if a.WCFlags&^WCStandardFlags != 0 {
			return nil, Errorf(op, ErrNotSupported, "the device provides only the standard completion fields (IBV_WC_STANDARD_FLAGS)")
		}
		if a.Flags&CreateCQAttrIgnoreOverrun != 0 {
			return nil, Errorf(op, ErrNotSupported, "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN")
		}
		d, err := c.driverCQ(a.CQE, notify, a.CompVector)
		if err != nil {
			return nil, err
		}
		if x, ok := d.(CQExDriver); ok {
			ex = x
		} else {
			ex = &pollOne{CQDriver: d}
		}
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	cq.SetCQContext(a.CQContext)
	return &CQEx{CQ: cq, ex: ex, wcFlags: a.WCFlags}, nil
}

// pollOne reads an ordinary CQ one completion at a time.
type pollOne struct {
	CQDriver
	wc [1]WC
}

func (p *pollOne) StartPoll(cur *WCEx) error { return p.NextPoll(cur) }

func (p *pollOne) NextPoll(cur *WCEx) error {
	n, err := p.Poll(p.wc[:])
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNoEntry
	}
	*cur = WCEx{WC: p.wc[0]}
	return nil
}

func (p *pollOne) EndPoll() {}

// WCFlags returns the completion fields the CQ was created with.
func (cq *CQEx) WCFlags() CreateCQWCFlags { return cq.wcFlags }

// StartPoll starts a batch of completions and makes the first one
// current (ibv_start_poll). attr may be nil. An empty CQ returns an
// error wrapping ErrNoEntry (ENOENT), as in C; the CQ stays usable and
// EndPoll is not needed. After an overrun it returns an error wrapping
// ErrIO once the queue is drained.
func (cq *CQEx) StartPoll(attr *PollCQAttr) error {
	if attr != nil && attr.CompMask != 0 {
		return Errorf("ibv_start_poll", ErrInvalidArgument, "comp_mask must be 0")
	}
	if err := cq.ex.StartPoll(&cq.cur); err != nil {
		if err == ErrNoEntry {
			return errStartPollEmpty
		}
		return err
	}
	// After the completion is taken: what the device wrote before it
	// completed is the program's to read from here on.
	racesync.Sync()
	cq.polling = true
	cq.WRID, cq.Status = cq.cur.WRID, cq.cur.Status
	return nil
}

// NextPoll makes the next completion current (ibv_next_poll). When there
// is none it returns an error wrapping ErrNoEntry; call EndPoll after it
// either way.
func (cq *CQEx) NextPoll() error {
	if !cq.polling {
		return Errorf("ibv_next_poll", ErrInvalidArgument, "no batch started (StartPoll)")
	}
	if err := cq.ex.NextPoll(&cq.cur); err != nil {
		if err == ErrNoEntry {
			return errNextPollEmpty
		}
		return err
	}
	racesync.Sync()
	cq.WRID, cq.Status = cq.cur.WRID, cq.cur.Status
	return nil
}

// EndPoll ends the batch StartPoll began (ibv_end_poll). Outside a batch
// it does nothing.
func (cq *CQEx) EndPoll() {
	if !cq.polling {
		return
	}
	cq.polling = false
	cq.ex.EndPoll()
}

// field returns v if the CQ was created with flag f, else 0.
func field[T uint8 | uint32 | uint64](cq *CQEx, f CreateCQWCFlags, v T) T {
	if cq.wcFlags&f == 0 {
		return 0
	}
	return v
}

// The Read methods return a field of the current completion. Fields the
// CQ was not created with (WCFlags) read as 0, and, as in C, most are
// meaningful only for successful completions of some opcodes.

// ReadOpcode returns the current completion's opcode (ibv_wc_read_opcode).
func (cq *CQEx) ReadOpcode() WCOpcode { return cq.cur.Opcode }

// ReadVendorErr returns the current completion's vendor error
// (ibv_wc_read_vendor_err).
func (cq *CQEx) ReadVendorErr() uint32 { return cq.cur.VendorErr }

// ReadWCFlags returns the current completion's flags
// (ibv_wc_read_wc_flags).
func (cq *CQEx) ReadWCFlags() WCFlags { return cq.cur.WCFlags }

// ReadByteLen returns the bytes received or read (ibv_wc_read_byte_len;
// WCExWithByteLen).
func (cq *CQEx) ReadByteLen() uint32 { return field(cq, WCExWithByteLen, cq.cur.ByteLen) }

// ReadImmData returns the immediate data, valid when ReadWCFlags has
// WCWithImm (ibv_wc_read_imm_data; WCExWithImm).
func (cq *CQEx) ReadImmData() uint32 { return field(cq, WCExWithImm, cq.cur.ImmData) }

// ReadInvalidatedRKey returns the rkey a SEND_WITH_INV invalidated,
// valid when ReadWCFlags has WCWithInv (ibv_wc_read_invalidated_rkey;
// WCExWithImm, as in C).
func (cq *CQEx) ReadInvalidatedRKey() uint32 { return cq.ReadImmData() }

// ReadQPNum returns the number of the local QP the completion is for
// (ibv_wc_read_qp_num; WCExWithQPNum).
func (cq *CQEx) ReadQPNum() uint32 { return field(cq, WCExWithQPNum, cq.cur.QPNum) }

// ReadSrcQP returns the sending QP's number of a UD receive
// (ibv_wc_read_src_qp; WCExWithSrcQP).
func (cq *CQEx) ReadSrcQP() uint32 { return field(cq, WCExWithSrcQP, cq.cur.SrcQP) }

// ReadSLID returns the source LID (ibv_wc_read_slid; WCExWithSLID); 0 on
// RoCE.
func (cq *CQEx) ReadSLID() uint32 { return field(cq, WCExWithSLID, uint32(cq.cur.SLID)) }

// ReadSL returns the service level (ibv_wc_read_sl; WCExWithSL).
func (cq *CQEx) ReadSL() uint8 { return field(cq, WCExWithSL, cq.cur.SL) }

// ReadDLIDPathBits returns the destination LID path bits
// (ibv_wc_read_dlid_path_bits; WCExWithDLIDPathBits).
func (cq *CQEx) ReadDLIDPathBits() uint8 { return field(cq, WCExWithDLIDPathBits, cq.cur.DLIDPathBits) }

// ReadCompletionTS returns when the device completed the work, in ticks
// of its clock: DeviceAttrEx.HCACoreClock kHz, wrapping at
// DeviceAttrEx.CompletionTimestampMask (ibv_wc_read_completion_ts;
// WCExWithCompletionTimestamp).
func (cq *CQEx) ReadCompletionTS() uint64 {
	return field(cq, WCExWithCompletionTimestamp, cq.cur.CompletionTS)
}

// ReadCompletionWallclockNS returns when the device completed the work,
// in nanoseconds since the Unix epoch
// (ibv_wc_read_completion_wallclock_ns;
// WCExWithCompletionTimestampWallclock).
func (cq *CQEx) ReadCompletionWallclockNS() uint64 {
	return field(cq, WCExWithCompletionTimestampWallclock, cq.cur.CompletionWallclockNS)
}
