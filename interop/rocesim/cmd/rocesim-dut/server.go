package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rdmago/rdmago/interop/rocesim/dut"
	"github.com/rdmago/rdmago/interop/rocesim/internal/sidepb"
	"github.com/rdmago/rdmago/verbs"
)

// server maps side.proto's messages onto a dut.Side. Every error goes back
// as a gRPC error, which roce-sim's manager logs as the case's failure.
type server struct {
	sidepb.UnimplementedSideServer
	side *dut.Side
}

var _ sidepb.SideServer = (*server)(nil)

// fail turns an error of the side into a gRPC status.
func fail(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.FailedPrecondition, err.Error())
}

// u8 narrows a field the proto carries as uint32 to the 8 bits ibv_qp_attr
// has, refusing values that do not fit.
func u8(name string, v uint32) (uint8, error) {
	if v > 0xff {
		return 0, status.Errorf(codes.InvalidArgument, "%s %d does not fit in 8 bits", name, v)
	}
	return uint8(v), nil
}

// connAttr collects the connection attributes both OpenDevice and
// ConnectQp carry.
func connAttr(access uint64, port, gid, timeout, retry, rnrRetry, mtu, sqPSN, rqPSN, maxRd, maxDestRd, minRNR uint32) (dut.ConnAttr, error) {
	a := dut.ConnAttr{Access: verbs.AccessFlags(access), MTU: int(mtu), SQPSN: sqPSN, RQPSN: rqPSN}
	if access > 0xffffffff {
		return a, status.Errorf(codes.InvalidArgument, "access flags %#x above 32 bits", access)
	}
	for _, f := range []struct {
		name string
		v    uint32
		to   *uint8
	}{
		{"ib_port_num", port, &a.Port}, {"gid_idx", gid, &a.GIDIndex}, {"timeout", timeout, &a.Timeout},
		{"retry", retry, &a.Retry}, {"rnr_retry", rnrRetry, &a.RNRRetry}, {"max_rd_atomic", maxRd, &a.MaxRdAtomic},
		{"max_dest_rd_atomic", maxDestRd, &a.MaxDestRdAtomic}, {"min_rnr_timer", minRNR, &a.MinRNRTimer},
	} {
		v, err := u8(f.name, f.v)
		if err != nil {
			return a, err
		}
		*f.to = v
	}
	return a, nil
}

func (s *server) Version(context.Context, *sidepb.VersionRequest) (*sidepb.VersionResponse, error) {
	return &sidepb.VersionResponse{Version: "0.1"}, nil
}

func (s *server) OpenDevice(_ context.Context, r *sidepb.OpenDeviceRequest) (*sidepb.OpenDeviceResponce, error) {
	conn, err := connAttr(r.GetAccessFlag(), r.GetIbPortNum(), r.GetGidIdx(), r.GetTimeout(), r.GetRetry(), r.GetRnrRetry(),
		r.GetMtu(), r.GetSqStartPsn(), r.GetRqStartPsn(), r.GetMaxRdAtomic(), r.GetMaxDestRdAtomic(), r.GetMinRnrTimer())
	if err != nil {
		return nil, err
	}
	res, err := s.side.OpenDevice(dut.OpenParams{
		DevName: r.GetDevName(), Conn: conn, CQSize: int(r.GetCqSize()), MaxCQE: int(r.GetMaxCqe()),
		ManualPoll: r.GetCqPollTrigger() == sidepb.OpenDeviceRequest_Manual,
	})
	if err != nil {
		return nil, fail(err)
	}
	return &sidepb.OpenDeviceResponce{DevName: res.DevName, QpNum: res.QPNum, Lid: uint32(res.LID), GidRaw: res.GID[:]}, nil
}

func (s *server) CreatePd(_ context.Context, r *sidepb.CreatePdRequest) (*sidepb.CreatePdResponse, error) {
	id, err := s.side.CreatePD(r.GetDevName())
	return &sidepb.CreatePdResponse{PdId: id}, fail(err)
}

func (s *server) CreateMr(_ context.Context, r *sidepb.CreateMrRequest) (*sidepb.CreateMrResponse, error) {
	if r.GetFlag() > 0xffffffff {
		return nil, status.Errorf(codes.InvalidArgument, "access flags %#x above 32 bits", r.GetFlag())
	}
	mr, err := s.side.CreateMR(r.GetPdId(), verbs.AccessFlags(r.GetFlag()), r.GetLen())
	if err != nil {
		return nil, fail(err)
	}
	return &sidepb.CreateMrResponse{Addr: mr.Addr, Len: mr.Len, Rkey: mr.RKey, Lkey: mr.LKey, MrId: mr.ID}, nil
}

func (s *server) CreateQp(_ context.Context, r *sidepb.CreateQpRequest) (*sidepb.CreateQpResponse, error) {
	t := verbs.QPTRC
	switch r.GetQpType() {
	case sidepb.CreateQpRequest_RC:
	case sidepb.CreateQpRequest_UC:
		t = verbs.QPTUC
	default:
		return nil, status.Errorf(codes.InvalidArgument, "QP type %v", r.GetQpType())
	}
	id, num, err := s.side.CreateQP(r.GetPdId(), t, r.GetCqId())
	return &sidepb.CreateQpResponse{QpId: id, QpNum: num}, fail(err)
}

func (s *server) CreateCq(_ context.Context, r *sidepb.CreateCqRequest) (*sidepb.CreateCqResponse, error) {
	id, err := s.side.CreateCQ(r.GetDevName(), int(r.GetCqSize()))
	return &sidepb.CreateCqResponse{CqId: id}, fail(err)
}

func (s *server) QueryPort(_ context.Context, r *sidepb.QueryPortRequest) (*sidepb.QueryPortResponse, error) {
	port, err := u8("ib_port_num", r.GetIbPortNum())
	if err != nil {
		return nil, err
	}
	lid, err := s.side.QueryPort(r.GetDevName(), port)
	return &sidepb.QueryPortResponse{Lid: uint32(lid)}, fail(err)
}

func (s *server) QueryGid(_ context.Context, r *sidepb.QueryGidRequest) (*sidepb.QueryGidResponse, error) {
	port, err := u8("ib_port_num", r.GetIbPortNum())
	if err != nil {
		return nil, err
	}
	gid, err := s.side.QueryGID(r.GetDevName(), port, int(r.GetGidIdx()))
	if err != nil {
		return nil, fail(err)
	}
	return &sidepb.QueryGidResponse{GidRaw: gid[:]}, nil
}

func (s *server) ConnectQp(_ context.Context, r *sidepb.ConnectQpRequest) (*sidepb.ConnectQpResponse, error) {
	conn, err := connAttr(r.GetAccessFlag(), r.GetIbPortNum(), r.GetGidIdx(), r.GetTimeout(), r.GetRetry(), r.GetRnrRetry(),
		r.GetMtu(), r.GetSqStartPsn(), r.GetRqStartPsn(), r.GetMaxRdAtomic(), r.GetMaxDestRdAtomic(), r.GetMinRnrTimer())
	if err != nil {
		return nil, err
	}
	var gid verbs.GID
	if len(r.GetRemoteGid()) != len(gid) {
		return nil, status.Errorf(codes.InvalidArgument, "remote GID of %d bytes, want %d", len(r.GetRemoteGid()), len(gid))
	}
	copy(gid[:], r.GetRemoteGid())
	if r.GetRemoteLid() > 0xffff {
		return nil, status.Errorf(codes.InvalidArgument, "remote LID %#x above 16 bits", r.GetRemoteLid())
	}
	remote := dut.Remote{QPNum: r.GetRemoteQpNum(), LID: uint16(r.GetRemoteLid()), GID: gid}
	return &sidepb.ConnectQpResponse{}, fail(s.side.ConnectQP(r.GetDevName(), r.GetQpId(), remote, conn))
}

func (s *server) RemoteRead(ctx context.Context, r *sidepb.RemoteReadRequest) (*sidepb.RemoteReadResponse, error) {
	op := dut.Op{Opcode: verbs.WRRDMARead, MR: r.GetMrId(), Addr: r.GetAddr(), Len: r.GetLen(), LKey: r.GetLkey(),
		RemoteAddr: r.GetRemoteAddr(), RKey: r.GetRemoteKey(), AllowErr: r.GetAllowErr()}
	return &sidepb.RemoteReadResponse{}, fail(s.side.RemoteOp(ctx, r.GetQpId(), op))
}

func (s *server) RemoteWrite(ctx context.Context, r *sidepb.RemoteWriteRequest) (*sidepb.RemoteWriteResponse, error) {
	op := dut.Op{Opcode: verbs.WRRDMAWrite, MR: r.GetMrId(), Addr: r.GetAddr(), Len: r.GetLen(), LKey: r.GetLkey(),
		RemoteAddr: r.GetRemoteAddr(), RKey: r.GetRemoteKey(), AllowErr: r.GetAllowErr()}
	return &sidepb.RemoteWriteResponse{}, fail(s.side.RemoteOp(ctx, r.GetQpId(), op))
}

// sendSolicited is IBV_SEND_SOLICITED, which roce-sim's send_flag may
// carry beside IBV_SEND_SIGNALED; the operation is signaled regardless,
// since the side waits for its completion.
const sendSolicited = 1 << 2

func (s *server) RemoteWriteImm(ctx context.Context, r *sidepb.RemoteWriteImmRequest) (*sidepb.RemoteWriteImmResponse, error) {
	op := dut.Op{Opcode: verbs.WRRDMAWriteWithImm, MR: r.GetMrId(), Addr: r.GetAddr(), Len: r.GetLen(), LKey: r.GetLkey(),
		RemoteAddr: r.GetRemoteAddr(), RKey: r.GetRemoteKey(), Imm: r.GetImmData(),
		Solicited: r.GetSendFlag()&sendSolicited != 0, AllowErr: r.GetAllowErr()}
	return &sidepb.RemoteWriteImmResponse{}, fail(s.side.RemoteOp(ctx, r.GetQpId(), op))
}

func (s *server) RemoteSend(ctx context.Context, r *sidepb.RemoteSendRequest) (*sidepb.RemoteSendResponse, error) {
	op := dut.Op{Opcode: verbs.WRSend, MR: r.GetMrId(), Addr: r.GetAddr(), Len: r.GetLen(), LKey: r.GetLkey(), AllowErr: r.GetAllowErr()}
	return &sidepb.RemoteSendResponse{}, fail(s.side.RemoteOp(ctx, r.GetQpId(), op))
}

func (s *server) RemoteAtomicCas(ctx context.Context, r *sidepb.RemoteAtomicCasRequest) (*sidepb.RemoteAtomicCasResponse, error) {
	op := dut.Op{Opcode: verbs.WRAtomicCmpAndSwp, Addr: r.GetAddr(), LKey: r.GetLkey(), RemoteAddr: r.GetRemoteAddr(),
		RKey: r.GetRemoteKey(), Compare: r.GetOldValue(), Swap: r.GetNewValue(), AllowErr: r.GetAllowErr()}
	return &sidepb.RemoteAtomicCasResponse{}, fail(s.side.RemoteOp(ctx, r.GetQpId(), op))
}

func (s *server) LocalWrite(_ context.Context, r *sidepb.LocalWriteRequest) (*sidepb.LocalWriteResponse, error) {
	if int(r.GetLen()) != len(r.GetContent()) {
		return nil, status.Errorf(codes.InvalidArgument, "len %d for %d bytes of content", r.GetLen(), len(r.GetContent()))
	}
	return &sidepb.LocalWriteResponse{}, fail(s.side.LocalWrite(r.GetMrId(), r.GetOffset(), r.GetContent()))
}

func (s *server) LocalCheckMem(_ context.Context, r *sidepb.LocalCheckMemRequest) (*sidepb.LocalCheckMemResponse, error) {
	same, err := s.side.LocalCheckMem(r.GetMrId(), r.GetOffset(), r.GetExpected())
	return &sidepb.LocalCheckMemResponse{Same: same}, fail(err)
}

func (s *server) LocalRecv(_ context.Context, r *sidepb.LocalRecvRequest) (*sidepb.LocalRecvResponse, error) {
	err := s.side.LocalRecv(r.GetQpId(), r.GetMrId(), r.GetAddr(), r.GetLen(), r.GetLkey(), r.GetImm())
	return &sidepb.LocalRecvResponse{}, fail(err)
}

// RecvPkt is the simulator's: a device receives packets by itself. As the
// Rust side, it answers with an empty reply.
func (s *server) RecvPkt(context.Context, *sidepb.RecvPktRequest) (*sidepb.RecvPktResponse, error) {
	return &sidepb.RecvPktResponse{}, nil
}

// UnblockRetry releases a simulator waiting before a retry; a device has
// nothing to release.
func (s *server) UnblockRetry(context.Context, *sidepb.UnblockRetryRequest) (*sidepb.UnblockRetryResponse, error) {
	return &sidepb.UnblockRetryResponse{}, nil
}

func (s *server) PollComplete(ctx context.Context, r *sidepb.PollCompleteRequest) (*sidepb.PollCompleteResponse, error) {
	var m dut.WCMatch
	if x, ok := r.GetSqpnOption().(*sidepb.PollCompleteRequest_Sqpn); ok {
		m.SrcQP = &x.Sqpn
	}
	if x, ok := r.GetQpnOption().(*sidepb.PollCompleteRequest_Qpn); ok {
		m.QPNum = &x.Qpn
	}
	if x, ok := r.GetLenOption().(*sidepb.PollCompleteRequest_Len); ok {
		m.Len = &x.Len
	}
	if x, ok := r.GetOpcodeOption().(*sidepb.PollCompleteRequest_Opcode); ok {
		m.Opcode = &x.Opcode
	}
	if x, ok := r.GetStatusOption().(*sidepb.PollCompleteRequest_Status); ok {
		m.Status = &x.Status
	}
	if x, ok := r.GetImmOrRkeyOption().(*sidepb.PollCompleteRequest_ImmDataOrInvRkey); ok {
		m.Imm = &x.ImmDataOrInvRkey
	}
	same, err := s.side.PollComplete(ctx, r.GetCqId(), m)
	return &sidepb.PollCompleteResponse{Same: same}, fail(err)
}

func (s *server) CheckQpStatus(_ context.Context, r *sidepb.CheckQpStatusRequest) (*sidepb.CheckQpStatusResponse, error) {
	same, err := s.side.CheckQPState(r.GetQpId(), verbs.QPState(r.GetStatus()))
	return &sidepb.CheckQpStatusResponse{Same: same}, fail(err)
}

func (s *server) ModifyQp(_ context.Context, r *sidepb.ModifyQpRequest) (*sidepb.ModifyQpResponse, error) {
	return &sidepb.ModifyQpResponse{}, fail(s.side.ModifyQP(r.GetQpId(), r.GetSqPsn()))
}

func (s *server) NotifyCq(_ context.Context, r *sidepb.NotifyCqRequest) (*sidepb.NotifyCqResponse, error) {
	return &sidepb.NotifyCqResponse{}, fail(s.side.NotifyCQ(r.GetCqId(), r.GetSolicitedOnly() != 0))
}

// SetHook installs one of the simulator's packet hooks (hooks.py); a device
// has none, and the Rust side leaves it unimplemented too.
func (s *server) SetHook(_ context.Context, r *sidepb.SetHookRequest) (*sidepb.SetHookResponse, error) {
	return nil, status.Error(codes.Unimplemented, fmt.Sprintf("hook %q: packet hooks are the simulator side's", r.GetHookName()))
}
