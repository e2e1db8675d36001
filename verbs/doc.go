// Package verbs is the verbs API of libibverbs in Go: the interface RDMA
// programs use to open a device, register memory, create completion queues
// and queue pairs, post work requests and reap completions.
//
// The names, numbers and semantics follow libibverbs, and every exported
// identifier's doc comment names its C counterpart, so a C RDMA programmer
// can read a Go program without a dictionary:
//
//	ibv_get_device_list   Devices, DeviceByName
//	ibv_open_device       (*Device).Open
//	ibv_query_device/port (*Context).QueryDevice, QueryPort, QueryGID, QueryPKey
//	ibv_alloc_pd          (*Context).AllocPD
//	ibv_reg_mr            (*PD).RegMR
//	ibv_create_cq         (*Context).CreateCQ; ibv_poll_cq: (*CQ).Poll
//	ibv_create_comp_channel, ibv_req_notify_cq, ibv_get_cq_event, ibv_ack_cq_events
//	ibv_create_qp         (*PD).CreateQP; ibv_modify_qp: (*QP).Modify
//	ibv_post_send         (*QP).PostSend; ibv_post_recv: (*QP).PostRecv
//	ibv_get_async_event   (*Context).GetAsyncEvent (AsyncEvent names the QP, SRQ, CQ or port)
//	ibv_fork_init         ForkInit
//	ibv_create_ah         (*PD).CreateAH; ibv_create_ah_from_wc: (*PD).CreateAHFromWC
//	ibv_init_ah_from_wc   (*Context).InitAHFromWC (UD receive buffers start with GRHLen bytes)
//	ibv_attach_mcast      (*QP).AttachMcast; ibv_detach_mcast: (*QP).DetachMcast
//	ibv_create_srq        (*PD).CreateSRQ; ibv_modify_srq, ibv_query_srq, ibv_post_srq_recv: (*SRQ).Modify, Query, PostRecv
//	ibv_alloc_mw          (*PD).AllocMW; ibv_bind_mw: (*QP).BindMW; IBV_WR_BIND_MW: SendWR.BindMW
//	ibv_inc_rkey          IncRKey
//	ibv_open_xrcd         (*Context).OpenXRCD; ibv_close_xrcd: (*XRCD).Close
//	ibv_create_srq_ex     (*Context).CreateSRQEx (IBV_SRQT_XRC); ibv_get_srq_num: (*SRQ).Num
//	ibv_create_qp_ex      IBV_QPT_XRC_SEND: (*PD).CreateQP; IBV_QPT_XRC_RECV: (*XRCD).CreateQP
//	ibv_open_qp           (*Context).OpenQP; wr.qp_type.xrc.remote_srqn: SendWR.RemoteSRQN
//
// XRC (eXtended Reliable Connection) lets one send queue serve many
// receivers: an XRC_SEND QP is connected to a remote XRC_RECV QP as RC QPs
// are, and each work request names in SendWR.RemoteSRQN the XRC SRQ, of
// the XRC_RECV QP's XRC domain, that takes it. The SRQ gives the receive
// WQE, the completion queue (the SRQ's CQ) and the PD that remote RDMA and
// atomics are checked against. Devices that do XRC report DeviceXRC.
//
// The extended verbs:
//
//	ibv_query_device_ex   (*Context).QueryDeviceEx
//	ibv_create_cq_ex      (*Context).CreateCQEx; ibv_cq_ex_to_cq: CQEx.CQ
//	ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*: (*CQEx).StartPoll, NextPoll, EndPoll, Read*
//	ibv_create_qp_ex      (*Context).CreateQPEx; ibv_qp_to_qp_ex: (*QP).QPEx
//	ibv_wr_start, ibv_wr_*, ibv_wr_complete, ibv_wr_abort: (*QPEx).WRStart, WRSend ..., WRComplete, WRAbort
//
// An extended CQ reads each completion in place, one field at a time, and
// may carry the device's completion timestamps; the software device
// stamps completions only for a CQ that asks. The work request builder
// collects requests between WRStart and WRComplete and posts them as one
// list, all or none on the software device. Neither allocates per
// completion or work request.
//
// Where Go has a better shape, the API takes it: errors are error values
// wrapping an errno (errors.Is(err, verbs.ErrInvalidArgument)); a failed post
// returns a *WRError naming the work request, as bad_wr does; blocking calls
// take a context.Context; a CQ can be waited on with Wait, and completion and
// asynchronous events can be read in a select through CompChannel.C and
// Context.AsyncEvents.
//
// A software device has one setting hardware lacks, who moves the data:
// Context.SetProgress with ProgressManual (libfabric's manual progress)
// makes the goroutine that posts and busy-polls drive the device, as
// perftest-style programs want; the default, ProgressAuto, leaves it to the
// device's goroutines, so that a program waiting on a CQ uses no CPU.
//
// Devices come from providers. Importing github.com/rdmago/rdmago/rxe
// registers the software RoCEv2 device, one per network interface.
package verbs
