package vrb

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/verbs"
)

// FI_EP_DGRAM: C's verbs provider offers unreliable datagrams over a UD
// QP, and so does this one, on the wire as C's:
//   - the endpoint is named by a struct ofi_ib_ud_ep_name (fabric.UDName:
//     the GID, QP number, LID and P_Key 0xffff), address format
//     FI_ADDR_IB_UD;
//   - sends are UD SENDs (SEND_WITH_IMM for fi_senddata) with Q_Key
//     0x11111111 and no header of the provider's, at most the port's
//     MTU;
//   - receives need FI_MSG_PREFIX: the first 40 bytes of each receive
//     buffer take the GRH, the message follows; the completion's length
//     counts both, as C's does;
//   - the domain is the device's name with "-dgram" after it, the GID the
//     one at index FI_VERBS_GID_IDX (0 unless set), as C's.

const (
	udQKey     = 0x11111111 // the Q_Key of C's UD endpoints
	udPrefix   = 40         // msg_prefix_size: the GRH
	udInject   = 512        // C's inject_size on a UD QP of rxe
	dgramTag   = "-dgram"   // the domain name's suffix
	udPKeyFull = 0xffff     // the default P_Key, in names
)

// gidIndex is the GID index C's provider takes for UD endpoints:
// FI_VERBS_GID_IDX, 0 by default.
func gidIndex() int {
	if v := os.Getenv("FI_VERBS_GID_IDX"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < 256 {
			return n
		}
	}
	return 0
}

// dgramInfos lists one FI_EP_DGRAM entry per device, as C's provider.
func dgramInfos() []*fabric.Info {
	devs, err := verbs.Devices()
	if err != nil {
		return nil
	}
	var out []*fabric.Info
	for _, d := range devs {
		ctx, err := d.Open()
		if err != nil {
			continue
		}
		pa, perr := ctx.QueryPort(1)
		g, gerr := ctx.QueryGID(1, gidIndex())
		da, derr := ctx.QueryDevice()
		ctx.Close()
		if perr != nil || gerr != nil || derr != nil {
			continue
		}
		i := dgramTemplate(d.Name(), g, pa.ActiveMTU.Bytes())
		if da.MaxInlineData > 0 {
			i.TxAttr.InjectSize = min(i.TxAttr.InjectSize, da.MaxInlineData)
		}
		out = append(out, i)
	}
	return out
}

// dgramTemplate is the fi_info of C's FI_EP_DGRAM entry.
func dgramTemplate(dev string, g verbs.GID, mtu int) *fabric.Info {
	order := fabric.OrderRAR | fabric.OrderRAW | fabric.OrderRAS | fabric.OrderWAW | fabric.OrderWAS | fabric.OrderSAW |
		fabric.OrderSAS | fabric.OrderRMARAR | fabric.OrderRMARAW | fabric.OrderRMAWAW | fabric.OrderAtomicRAR |
		fabric.OrderAtomicRAW | fabric.OrderAtomicWAW
	caps := fabric.CapMsg | fabric.CapRecv | fabric.CapSend | fabric.CapLocalComm | fabric.CapRemoteComm
	return &fabric.Info{
		Caps:       caps,
		Mode:       fabric.ModeMsgPrefix | fabric.ModeRxCQData,
		AddrFormat: fabric.FormatIBUD,
		SrcName:    fabric.UDName{}.Bytes(), // as C's: the name is known once the QP is
		TxAttr: &fabric.TxAttr{Caps: fabric.CapMsg | fabric.CapSend, MsgOrder: order, CompOrder: fabric.OrderStrict,
			InjectSize: udInject, Size: defaultSize, IOVLimit: maxIOV, RMAIOVLimit: 1},
		RxAttr: &fabric.RxAttr{Caps: fabric.CapMsg | fabric.CapRecv, Mode: fabric.ModeMsgPrefix | fabric.ModeRxCQData,
			MsgOrder: order, CompOrder: fabric.OrderStrict | fabric.OrderData, Size: defaultSize, IOVLimit: maxIOV},
		EPAttr: &fabric.EPAttr{Type: fabric.EPDgram, Protocol: fabric.ProtoIBUD, ProtocolVersion: 1, MaxMsgSize: uint64(mtu),
			MsgPrefixSize: udPrefix, MaxOrderRAWSize: uint64(mtu), MaxOrderWAWSize: uint64(mtu), TxCtxCnt: 1, RxCtxCnt: 1},
		DomainAttr: &fabric.DomainAttr{Name: dev + dgramTag, Threading: fabric.ThreadSafe, ControlProgress: fabric.ProgressAuto,
			DataProgress: fabric.ProgressAuto, ResourceMgmt: fabric.RMEnabled, AVType: fabric.AVUnspec,
			MRMode: fabric.MRLocal | fabric.MRVirtAddr | fabric.MRAllocated | fabric.MRProvKey, MRKeySize: 4,
			CQDataSize: 4, CQCnt: 1 << 20, EPCnt: 1 << 20, TxCtxCnt: 1024, RxCtxCnt: 1024, MaxEPTxCtx: 1024, MaxEPRxCtx: 1024,
			MRIOVLimit: 1, Caps: fabric.CapLocalComm | fabric.CapRemoteComm},
		FabricAttr: &fabric.FabricAttr{Name: fabricName(g), ProvName: Name, ProvVersion: fabric.MakeVersion(117, 0), APIVersion: fabric.APIVersion},
	}
}

// fabricName is C's fabric name: "IB-0x" and the GID's subnet prefix in
// hex.
func fabricName(g verbs.GID) string {
	return fmt.Sprintf("IB-0x%x", binary.BigEndian.Uint64(g[:8]))
}

// udState is a datagram endpoint's: its name, its address vector and an
// address handle per peer it has sent to.
type udState struct {
	av     *fabric.AV
	pd     *verbs.PD
	gidIdx int
	maxMsg int
	name   fabric.UDName
	ahs    map[fabric.Addr]udDest
	stale  []*verbs.AH // handles replaced while sends may still use them
}

// udDest is a peer's address handle, and the name it was made for (an AV
// handle may be removed and reused).
type udDest struct {
	name []byte
	n    fabric.UDName
	ah   *verbs.AH
}

func newDgram(d fabric.DomainRef, dom *domain, info *fabric.Info, context any) *ep {
	e := newEP(d, dom, info, context, udInject)
	e.ud = &udState{pd: dom.pd, gidIdx: gidIndex(), ahs: map[fabric.Addr]udDest{}}
	if info.EPAttr != nil {
		e.ud.maxMsg = int(min(info.EPAttr.MaxMsgSize, 1<<31))
	}
	return e
}

// enableUD creates the UD QP and brings it to RTS. Called with e.mu held.
func (e *ep) enableUD() error {
	if e.Comp.TxCQ == nil || e.Comp.RxCQ == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoCQ, "bind CQs first")
	}
	ctx := e.dom.ctx
	pa, err := ctx.QueryPort(1)
	if err != nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoDevice, err.Error())
	}
	if da, err := ctx.QueryDevice(); err == nil && da.MaxInlineData > 0 {
		e.inline = min(e.inline, da.MaxInlineData)
	}
	g, err := ctx.QueryGID(1, e.ud.gidIdx)
	if err != nil || g.IsZero() {
		return fabric.Errorf("fi_enable", fabric.ErrAddrNotAvail, fmt.Sprintf("no GID at index %d (FI_VERBS_GID_IDX)", e.ud.gidIdx))
	}
	if e.ud.maxMsg <= 0 || e.ud.maxMsg > pa.ActiveMTU.Bytes() {
		e.ud.maxMsg = pa.ActiveMTU.Bytes()
	}
	cq, err := ctx.CreateCQ(e.txSize+e.rxSize, nil, 0)
	if err != nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoMemory, err.Error())
	}
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTUD, Cap: verbs.QPCap{
		MaxSendWR: uint32(e.txSize), MaxRecvWR: uint32(e.rxSize), MaxSendSGE: maxIOV, MaxRecvSGE: maxIOV, MaxInlineData: uint32(e.inline)}}
	qp, err := e.dom.pd.CreateQP(&attr)
	if err != nil {
		cq.Destroy()
		return fabric.Errorf("fi_enable", fabric.ErrNoMemory, err.Error())
	}
	fail := func(err error) error {
		qp.Destroy()
		cq.Destroy()
		return fabric.Errorf("fi_enable", fabric.ErrIO, err.Error())
	}
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QKey: udQKey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState},
		{verbs.QPAttr{QPState: verbs.QPSRTS}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.m); err != nil {
			return fail(err)
		}
	}
	e.inline = min(e.inline, int(attr.Cap.MaxInlineData))
	bounce, err := e.dom.pd.RegMR(make([]byte, max(e.inline, 1)), verbs.AccessLocalWrite)
	if err != nil {
		return fail(err)
	}
	e.ud.name = fabric.UDName{GID: g, QPN: qp.Num(), LID: pa.LID, PKey: udPKeyFull}
	e.cq, e.qp, e.bounce, e.state = cq, qp, bounce, stConnected
	e.startBackground()
	return nil
}

// RawName returns a datagram endpoint's name (fi_getname): a UDName's
// bytes, format FI_ADDR_IB_UD.
func (e *ep) RawName() (fabric.AddrFormat, []byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ud == nil {
		a, err := e.id.LocalAddr(), error(nil)
		f, b := fabric.SockaddrBytes(a)
		return f, b, err
	}
	if e.qp == nil {
		return fabric.FormatIBUD, nil, fabric.Errorf("fi_getname", fabric.ErrOpBadState, "enable the endpoint first: its name is its QP's")
	}
	return fabric.FormatIBUD, e.ud.name.Bytes(), nil
}

// address fills a UD send's address handle, QP number and Q_Key from
// the AV entry dest. Called with e.mu held.
func (u *udState) address(op string, wr *verbs.SendWR, dest fabric.Addr, n int) error {
	if wr.Opcode != verbs.WRSend && wr.Opcode != verbs.WRSendWithImm {
		return fabric.Errorf(op, fabric.ErrNotSupported, "an FI_EP_DGRAM endpoint only sends messages")
	}
	if n > u.maxMsg {
		return fabric.Errorf(op, fabric.ErrMsgSize, fmt.Sprintf("a datagram of %d bytes is over the MTU (%d)", n, u.maxMsg))
	}
	if u.av == nil {
		return fabric.Errorf(op, fabric.ErrNoAV, "bind an AV first")
	}
	f, name, err := u.av.LookupName(dest)
	if err != nil {
		return fabric.Errorf(op, fabric.ErrNoEntry, "no address with that handle")
	}
	if f != fabric.FormatIBUD {
		return fabric.Errorf(op, fabric.ErrInvalid, "the address is of format "+f.String()+", not FI_ADDR_IB_UD")
	}
	d, ok := u.ahs[dest]
	if !ok || !bytes.Equal(d.name, name) {
		if ok {
			// (Sends in flight may use it: it goes at Close.)
			u.stale = append(u.stale, d.ah)
			delete(u.ahs, dest)
		}
		if d, err = u.makeAH(op, name); err != nil {
			return err
		}
		u.ahs[dest] = d
	}
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = d.ah, d.n.QPN, udQKey
	return nil
}

// makeAH makes the address handle for a peer's name, as C's AV insert
// does: global (GRH, hop limit 64, this endpoint's GID index) when the
// GID has an interface ID.
func (u *udState) makeAH(op string, name []byte) (udDest, error) {
	n, err := fabric.ParseUDName(name)
	if err != nil {
		return udDest{}, err
	}
	attr := verbs.AHAttr{DLID: n.LID, SL: n.SL, PortNum: 1}
	if binary.BigEndian.Uint64(n.GID[8:]) != 0 {
		attr.IsGlobal = true
		attr.GRH = verbs.GlobalRoute{DGID: verbs.GID(n.GID), SGIDIndex: uint8(u.gidIdx), HopLimit: 64}
	} else if n.LID == 0 {
		return udDest{}, fabric.Errorf(op, fabric.ErrAddrNotAvail, "the name has neither a GID nor a LID")
	}
	ah, err := u.pd.CreateAH(&attr)
	if err != nil {
		return udDest{}, fabric.Errorf(op, fabric.ErrAddrNotAvail, err.Error())
	}
	return udDest{name: append([]byte(nil), name...), n: n, ah: ah}, nil
}

func (u *udState) destroyAHs() {
	for h, d := range u.ahs {
		d.ah.Destroy()
		delete(u.ahs, h)
	}
	for _, ah := range u.stale {
		ah.Destroy()
	}
	u.stale = nil
}
