package mad

// SIDRREQ is ServiceIDResReq (IBTA vol. 1 §12.6, Table 119; struct
// cm_sidr_req_msg): a UD client asks which QP and Q_Key serve a service ID.
type SIDRREQ struct {
	RequestID uint32
	PKey      uint16
	ServiceID ServiceID
	// PrivateData starts with rdma_cm's 36-byte cma_hdr when rdma_cm
	// sends the SIDR_REQ; see [SIDRREQ.CMAHeader].
	PrivateData [SIDRREQPrivateDataLen]byte
}

const (
	sidrReqRequestID   = 0
	sidrReqPKey        = 4 // P_Key:16, reserved:16
	sidrReqServiceID   = 8
	sidrReqPrivateData = 16
)

// AttrID returns AttrSIDRREQ.
func (m *SIDRREQ) AttrID() AttrID { return AttrSIDRREQ }

// Unmarshal decodes a 232-byte SIDR_REQ body.
func (m *SIDRREQ) Unmarshal(b []byte) error {
	if err := checkBody("SIDR_REQ", b); err != nil {
		return err
	}
	*m = SIDRREQ{
		RequestID: be32(b, sidrReqRequestID),
		PKey:      be16(b, sidrReqPKey),
		ServiceID: ServiceID(be64(b, sidrReqServiceID)),
	}
	copy(m.PrivateData[:], b[sidrReqPrivateData:])
	return nil
}

// Append appends the SIDR_REQ's 232-byte body to b. It does not fail.
func (m *SIDRREQ) Append(b []byte) ([]byte, error) {
	b, p := grow(b, BodyLen)
	put32(p, sidrReqRequestID, m.RequestID)
	put16(p, sidrReqPKey, m.PKey)
	put64(p, sidrReqServiceID, uint64(m.ServiceID))
	copy(p[sidrReqPrivateData:], m.PrivateData[:])
	return b, nil
}

// CMAHeader parses the rdma_cm header at the start of the SIDR_REQ's
// private data and returns it with the 180 bytes that follow, the
// application's private data (aliasing m.PrivateData).
func (m *SIDRREQ) CMAHeader() (CMAHeader, []byte, error) {
	return ParseCMAHeader(m.PrivateData[:])
}

// SetCMAPrivateData fills the SIDR_REQ's private data as rdma_cm does: h,
// then the application's data (at most 180 bytes), then zeros.
func (m *SIDRREQ) SetCMAPrivateData(h *CMAHeader, data []byte) error {
	return setCMAPrivateData(m.PrivateData[:], h, data)
}

// SIDRREP is ServiceIDResReqResp (IBTA vol. 1 §12.6, Table 120; struct
// cm_sidr_rep_msg): the answer to a SIDR_REQ.
type SIDRREP struct {
	RequestID uint32
	Status    SIDRStatus
	// AddInfoLen (at most 72) is the number of meaningful bytes at the
	// start of ClassPortInfo.
	AddInfoLen uint8
	// VendorID (24 bits) is the ECE vendor ID (IBTA 1.4; 0 unless ECE is
	// in use): its high 16 bits follow AddInfoLen, its low 8 bits QPN.
	VendorID  uint32
	QPN       uint32 // 24 bits
	ServiceID ServiceID
	QKey      uint32
	// ClassPortInfo is the additional information: the ClassPortInfo
	// to redirect to when Status is SIDRRedirect. Bytes past AddInfoLen
	// are kept as they are.
	ClassPortInfo [ARILen]byte
	PrivateData   [SIDRREPPrivateDataLen]byte
}

const (
	sidrRepRequestID   = 0
	sidrRepStatus      = 4
	sidrRepAddInfoLen  = 5
	sidrRepVendorIDHi  = 6 // vendor ID[23:8]
	sidrRepQPN         = 8 // QPN:24, vendor ID[7:0]
	sidrRepVendorIDLo  = 11
	sidrRepServiceID   = 12
	sidrRepQKey        = 20
	sidrRepInfo        = 24
	sidrRepPrivateData = 96
)

// AttrID returns AttrSIDRREP.
func (m *SIDRREP) AttrID() AttrID { return AttrSIDRREP }

// Info returns the meaningful part of the additional information,
// m.ClassPortInfo[:m.AddInfoLen] (all of it if AddInfoLen is out of range).
func (m *SIDRREP) Info() []byte {
	if int(m.AddInfoLen) > ARILen {
		return m.ClassPortInfo[:]
	}
	return m.ClassPortInfo[:m.AddInfoLen]
}

// Unmarshal decodes a 232-byte SIDR_REP body. It fails with a
// [*FieldError] if AddInfoLen exceeds 72.
func (m *SIDRREP) Unmarshal(b []byte) error {
	if err := checkBody("SIDR_REP", b); err != nil {
		return err
	}
	f := fields{msg: "SIDR_REP"}
	f.max("AddInfoLen", sidrRepAddInfoLen, uint64(b[sidrRepAddInfoLen]), ARILen, "the additional information")
	if f.err != nil {
		return f.err
	}
	*m = SIDRREP{
		RequestID:     be32(b, sidrRepRequestID),
		Status:        SIDRStatus(b[sidrRepStatus]),
		AddInfoLen:    b[sidrRepAddInfoLen],
		VendorID:      uint32(be16(b, sidrRepVendorIDHi))<<8 | uint32(b[sidrRepVendorIDLo]),
		QPN:           be24(b, sidrRepQPN),
		ServiceID:     ServiceID(be64(b, sidrRepServiceID)),
		QKey:          be32(b, sidrRepQKey),
		ClassPortInfo: [ARILen]byte(b[sidrRepInfo:]),
	}
	copy(m.PrivateData[:], b[sidrRepPrivateData:])
	return nil
}

// Append appends the SIDR_REP's 232-byte body to b. It fails with a
// [*FieldError] if AddInfoLen exceeds 72 or VendorID or QPN does not fit
// in 24 bits.
func (m *SIDRREP) Append(b []byte) ([]byte, error) {
	f := fields{msg: "SIDR_REP"}
	f.max("AddInfoLen", sidrRepAddInfoLen, uint64(m.AddInfoLen), ARILen, "the additional information")
	f.fit("VendorID", sidrRepVendorIDHi, uint64(m.VendorID), 24)
	f.fit("QPN", sidrRepQPN, uint64(m.QPN), 24)
	if f.err != nil {
		return b, f.err
	}
	b, p := grow(b, BodyLen)
	put32(p, sidrRepRequestID, m.RequestID)
	p[sidrRepStatus] = uint8(m.Status)
	p[sidrRepAddInfoLen] = m.AddInfoLen
	put16(p, sidrRepVendorIDHi, uint16(m.VendorID>>8))
	put24(p, sidrRepQPN, m.QPN)
	p[sidrRepVendorIDLo] = byte(m.VendorID)
	put64(p, sidrRepServiceID, uint64(m.ServiceID))
	put32(p, sidrRepQKey, m.QKey)
	copy(p[sidrRepInfo:], m.ClassPortInfo[:])
	copy(p[sidrRepPrivateData:], m.PrivateData[:])
	return b, nil
}
