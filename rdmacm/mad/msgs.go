package mad

// Offsets shared by the messages that start with the two communication IDs.
const (
	offLocalCommID  = 0
	offRemoteCommID = 4
)

// ARILen is the size of a REJ's additional rejection information and of a
// SIDR_REP's additional information (a ClassPortInfo on redirect).
const ARILen = 72

// MRA is MsgRcptAck (IBTA vol. 1 §12.6, Table 107; struct cm_mra_msg):
// the receiver of a REQ, REP or LAP needs more time to answer it.
type MRA struct {
	LocalCommID  uint32
	RemoteCommID uint32
	MessageMRAed MsgCode // 2 bits: MsgCodeREQ, MsgCodeREP or MsgCodeLAP
	// ServiceTimeout (5 bits) is the extra time the sender needs:
	// 4.096 µs << ServiceTimeout.
	ServiceTimeout uint8
	PrivateData    [MRAPrivateDataLen]byte
}

const (
	mraMessage     = 8 // message MRAed:2, reserved:6
	mraTimeout     = 9 // service timeout:5, reserved:3
	mraPrivateData = 10
)

// AttrID returns AttrMRA.
func (m *MRA) AttrID() AttrID { return AttrMRA }

// Unmarshal decodes a 232-byte MRA body. It fails with a [*FieldError] if
// MessageMRAed holds the reserved code 3.
func (m *MRA) Unmarshal(b []byte) error {
	if err := checkBody("MRA", b); err != nil {
		return err
	}
	f := fields{msg: "MRA"}
	f.notReserved("MessageMRAed", mraMessage, uint64(b[mraMessage]>>6), 3)
	if f.err != nil {
		return f.err
	}
	*m = MRA{
		LocalCommID:    be32(b, offLocalCommID),
		RemoteCommID:   be32(b, offRemoteCommID),
		MessageMRAed:   MsgCode(b[mraMessage] >> 6),
		ServiceTimeout: b[mraTimeout] >> 3,
	}
	copy(m.PrivateData[:], b[mraPrivateData:])
	return nil
}

// Append appends the MRA's 232-byte body to b. It fails with a
// [*FieldError] if a field does not fit its bits or MessageMRAed is 3.
func (m *MRA) Append(b []byte) ([]byte, error) {
	f := fields{msg: "MRA"}
	f.fit("MessageMRAed", mraMessage, uint64(m.MessageMRAed), 2)
	f.notReserved("MessageMRAed", mraMessage, uint64(m.MessageMRAed), 3)
	f.fit("ServiceTimeout", mraTimeout, uint64(m.ServiceTimeout), 5)
	if f.err != nil {
		return b, f.err
	}
	b, p := grow(b, BodyLen)
	put32(p, offLocalCommID, m.LocalCommID)
	put32(p, offRemoteCommID, m.RemoteCommID)
	p[mraMessage] = uint8(m.MessageMRAed) << 6
	p[mraTimeout] = m.ServiceTimeout << 3
	copy(p[mraPrivateData:], m.PrivateData[:])
	return b, nil
}

// REJ is ConnectReject (IBTA vol. 1 §12.6, Table 108; struct
// cm_rej_msg): the sender refuses a REQ or REP, or gives up on a
// connection.
type REJ struct {
	LocalCommID     uint32
	RemoteCommID    uint32  // 0 when rejecting a REQ whose sender is unknown
	MessageRejected MsgCode // 2 bits: MsgCodeREQ, MsgCodeREP or MsgCodeOther
	// RejectInfoLen (7 bits, at most 72) is the number of meaningful
	// bytes at the start of ARI.
	RejectInfoLen uint8
	Reason        RejectReason
	// ARI is the additional rejection information, whose meaning depends
	// on Reason (a GID for RejectInvalidGID, a ClassPortInfo for the
	// redirects, ...). Bytes past RejectInfoLen are kept as they are.
	ARI         [ARILen]byte
	PrivateData [REJPrivateDataLen]byte
}

const (
	rejMessage     = 8  // message rejected:2, reserved:6
	rejInfoLen     = 9  // reject info length:7, reserved:1
	rejReason      = 10 // 16 bits
	rejARI         = 12
	rejPrivateData = 84
)

// AttrID returns AttrREJ.
func (m *REJ) AttrID() AttrID { return AttrREJ }

// Info returns the meaningful part of the ARI, m.ARI[:m.RejectInfoLen]
// (all of it if RejectInfoLen is out of range).
func (m *REJ) Info() []byte {
	if int(m.RejectInfoLen) > ARILen {
		return m.ARI[:]
	}
	return m.ARI[:m.RejectInfoLen]
}

// Unmarshal decodes a 232-byte REJ body. It fails with a [*FieldError] if
// MessageRejected holds the reserved code 3 or RejectInfoLen exceeds 72.
func (m *REJ) Unmarshal(b []byte) error {
	if err := checkBody("REJ", b); err != nil {
		return err
	}
	f := fields{msg: "REJ"}
	f.notReserved("MessageRejected", rejMessage, uint64(b[rejMessage]>>6), 3)
	f.max("RejectInfoLen", rejInfoLen, uint64(b[rejInfoLen]>>1), ARILen, "the ARI")
	if f.err != nil {
		return f.err
	}
	*m = REJ{
		LocalCommID:     be32(b, offLocalCommID),
		RemoteCommID:    be32(b, offRemoteCommID),
		MessageRejected: MsgCode(b[rejMessage] >> 6),
		RejectInfoLen:   b[rejInfoLen] >> 1,
		Reason:          RejectReason(be16(b, rejReason)),
		ARI:             [ARILen]byte(b[rejARI:]),
	}
	copy(m.PrivateData[:], b[rejPrivateData:])
	return nil
}

// Append appends the REJ's 232-byte body to b. It fails with a
// [*FieldError] if MessageRejected is not 0 to 2 or RejectInfoLen exceeds
// 72.
func (m *REJ) Append(b []byte) ([]byte, error) {
	f := fields{msg: "REJ"}
	f.fit("MessageRejected", rejMessage, uint64(m.MessageRejected), 2)
	f.notReserved("MessageRejected", rejMessage, uint64(m.MessageRejected), 3)
	f.max("RejectInfoLen", rejInfoLen, uint64(m.RejectInfoLen), ARILen, "the ARI")
	if f.err != nil {
		return b, f.err
	}
	b, p := grow(b, BodyLen)
	put32(p, offLocalCommID, m.LocalCommID)
	put32(p, offRemoteCommID, m.RemoteCommID)
	p[rejMessage] = uint8(m.MessageRejected) << 6
	p[rejInfoLen] = m.RejectInfoLen << 1
	put16(p, rejReason, uint16(m.Reason))
	copy(p[rejARI:], m.ARI[:])
	copy(p[rejPrivateData:], m.PrivateData[:])
	return b, nil
}

// REP is ConnectReply (IBTA vol. 1 §12.6, Table 110; struct cm_rep_msg):
// the passive side accepts a REQ. "Local" fields describe the sender.
type REP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	LocalQKey    uint32 // for RD; 0 for RC
	LocalQPN     uint32 // 24 bits
	LocalEECN    uint32 // 24 bits, RD only
	// StartingPSN (24 bits) is the PSN at which the sender's receive
	// queue starts: the active side sends from it.
	StartingPSN uint32
	// VendorID (24 bits) is the ECE vendor ID (IBTA 1.4; 0 unless ECE
	// is in use), carried a byte at a time after LocalQPN (high),
	// LocalEECN and StartingPSN (low).
	VendorID           uint32
	ResponderResources uint8
	InitiatorDepth     uint8
	// TargetACKDelay (5 bits) is the sender's ACK delay:
	// 4.096 µs << TargetACKDelay.
	TargetACKDelay      uint8
	FailoverAccepted    Failover // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataLen]byte
}

const (
	repLocalQKey    = 8
	repLocalQPN     = 12 // QPN:24, vendor ID[23:16]
	repLocalEECN    = 16 // EECN:24, vendor ID[15:8]
	repStartingPSN  = 20 // PSN:24, vendor ID[7:0]
	repRespRes      = 24
	repInitDepth    = 25
	repByte26       = 26 // target ACK delay:5, failover accepted:2, e2e flow control:1
	repByte27       = 27 // RNR retry count:3, SRQ:1, reserved:4
	repLocalCAGUID  = 28
	repPrivateData  = 36
	repVendorIDHigh = repLocalQPN + 3
	repVendorIDMid  = repLocalEECN + 3
	repVendorIDLow  = repStartingPSN + 3
)

// AttrID returns AttrREP.
func (m *REP) AttrID() AttrID { return AttrREP }

// Unmarshal decodes a 232-byte REP body. Every field value is accepted.
func (m *REP) Unmarshal(b []byte) error {
	if err := checkBody("REP", b); err != nil {
		return err
	}
	*m = REP{
		LocalCommID:         be32(b, offLocalCommID),
		RemoteCommID:        be32(b, offRemoteCommID),
		LocalQKey:           be32(b, repLocalQKey),
		LocalQPN:            be24(b, repLocalQPN),
		LocalEECN:           be24(b, repLocalEECN),
		StartingPSN:         be24(b, repStartingPSN),
		VendorID:            uint32(b[repVendorIDHigh])<<16 | uint32(b[repVendorIDMid])<<8 | uint32(b[repVendorIDLow]),
		ResponderResources:  b[repRespRes],
		InitiatorDepth:      b[repInitDepth],
		TargetACKDelay:      b[repByte26] >> 3,
		FailoverAccepted:    Failover(b[repByte26] >> 1 & 3),
		EndToEndFlowControl: b[repByte26]&1 != 0,
		RNRRetryCount:       b[repByte27] >> 5,
		SRQ:                 b[repByte27]>>4&1 != 0,
		LocalCAGUID:         be64(b, repLocalCAGUID),
	}
	copy(m.PrivateData[:], b[repPrivateData:])
	return nil
}

// Append appends the REP's 232-byte body to b. It fails with a
// [*FieldError] if a field does not fit its bits.
func (m *REP) Append(b []byte) ([]byte, error) {
	f := fields{msg: "REP"}
	f.fit("LocalQPN", repLocalQPN, uint64(m.LocalQPN), 24)
	f.fit("LocalEECN", repLocalEECN, uint64(m.LocalEECN), 24)
	f.fit("StartingPSN", repStartingPSN, uint64(m.StartingPSN), 24)
	f.fit("VendorID", repVendorIDHigh, uint64(m.VendorID), 24)
	f.fit("TargetACKDelay", repByte26, uint64(m.TargetACKDelay), 5)
	f.fit("FailoverAccepted", repByte26, uint64(m.FailoverAccepted), 2)
	f.fit("RNRRetryCount", repByte27, uint64(m.RNRRetryCount), 3)
	if f.err != nil {
		return b, f.err
	}
	b, p := grow(b, BodyLen)
	put32(p, offLocalCommID, m.LocalCommID)
	put32(p, offRemoteCommID, m.RemoteCommID)
	put32(p, repLocalQKey, m.LocalQKey)
	put24(p, repLocalQPN, m.LocalQPN)
	put24(p, repLocalEECN, m.LocalEECN)
	put24(p, repStartingPSN, m.StartingPSN)
	p[repVendorIDHigh] = byte(m.VendorID >> 16)
	p[repVendorIDMid] = byte(m.VendorID >> 8)
	p[repVendorIDLow] = byte(m.VendorID)
	p[repRespRes] = m.ResponderResources
	p[repInitDepth] = m.InitiatorDepth
	p[repByte26] = m.TargetACKDelay<<3 | uint8(m.FailoverAccepted)<<1 | bit(m.EndToEndFlowControl, 0)
	p[repByte27] = m.RNRRetryCount<<5 | bit(m.SRQ, 4)
	put64(p, repLocalCAGUID, m.LocalCAGUID)
	copy(p[repPrivateData:], m.PrivateData[:])
	return b, nil
}

// RTU is ReadyToUse (IBTA vol. 1 §12.6, Table 111; struct cm_rtu_msg):
// the active side has its QP ready after a REP.
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataLen]byte
}

const rtuPrivateData = 8

// AttrID returns AttrRTU.
func (m *RTU) AttrID() AttrID { return AttrRTU }

// Unmarshal decodes a 232-byte RTU body.
func (m *RTU) Unmarshal(b []byte) error {
	if err := checkBody("RTU", b); err != nil {
		return err
	}
	*m = RTU{LocalCommID: be32(b, offLocalCommID), RemoteCommID: be32(b, offRemoteCommID)}
	copy(m.PrivateData[:], b[rtuPrivateData:])
	return nil
}

// Append appends the RTU's 232-byte body to b. It does not fail.
func (m *RTU) Append(b []byte) ([]byte, error) {
	b, p := grow(b, BodyLen)
	put32(p, offLocalCommID, m.LocalCommID)
	put32(p, offRemoteCommID, m.RemoteCommID)
	copy(p[rtuPrivateData:], m.PrivateData[:])
	return b, nil
}

// DREQ is DisconnectRequest (IBTA vol. 1 §12.6, Table 112; struct
// cm_dreq_msg): the sender closes the connection.
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	// RemoteQPN (24 bits) is the receiver's QPN (or EECN for RD), as a
	// check that the right connection is being closed.
	RemoteQPN   uint32
	PrivateData [DREQPrivateDataLen]byte
}

const (
	dreqRemoteQPN   = 8 // QPN/EECN:24, reserved:8
	dreqPrivateData = 12
)

// AttrID returns AttrDREQ.
func (m *DREQ) AttrID() AttrID { return AttrDREQ }

// Unmarshal decodes a 232-byte DREQ body.
func (m *DREQ) Unmarshal(b []byte) error {
	if err := checkBody("DREQ", b); err != nil {
		return err
	}
	*m = DREQ{
		LocalCommID:  be32(b, offLocalCommID),
		RemoteCommID: be32(b, offRemoteCommID),
		RemoteQPN:    be24(b, dreqRemoteQPN),
	}
	copy(m.PrivateData[:], b[dreqPrivateData:])
	return nil
}

// Append appends the DREQ's 232-byte body to b. It fails with a
// [*FieldError] if RemoteQPN does not fit in 24 bits.
func (m *DREQ) Append(b []byte) ([]byte, error) {
	f := fields{msg: "DREQ"}
	f.fit("RemoteQPN", dreqRemoteQPN, uint64(m.RemoteQPN), 24)
	if f.err != nil {
		return b, f.err
	}
	b, p := grow(b, BodyLen)
	put32(p, offLocalCommID, m.LocalCommID)
	put32(p, offRemoteCommID, m.RemoteCommID)
	put24(p, dreqRemoteQPN, m.RemoteQPN)
	copy(p[dreqPrivateData:], m.PrivateData[:])
	return b, nil
}

// DREP is DisconnectReply (IBTA vol. 1 §12.6, Table 113; struct
// cm_drep_msg): the answer to a DREQ.
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateDataLen]byte
}

const drepPrivateData = 8

// AttrID returns AttrDREP.
func (m *DREP) AttrID() AttrID { return AttrDREP }

// Unmarshal decodes a 232-byte DREP body.
func (m *DREP) Unmarshal(b []byte) error {
	if err := checkBody("DREP", b); err != nil {
		return err
	}
	*m = DREP{LocalCommID: be32(b, offLocalCommID), RemoteCommID: be32(b, offRemoteCommID)}
	copy(m.PrivateData[:], b[drepPrivateData:])
	return nil
}

// Append appends the DREP's 232-byte body to b. It does not fail.
func (m *DREP) Append(b []byte) ([]byte, error) {
	b, p := grow(b, BodyLen)
	put32(p, offLocalCommID, m.LocalCommID)
	put32(p, offRemoteCommID, m.RemoteCommID)
	copy(p[drepPrivateData:], m.PrivateData[:])
	return b, nil
}
