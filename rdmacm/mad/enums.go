package mad

import "fmt"

// AttrID is the attribute ID of a CM MAD, which names the message it
// carries (IBTA vol. 1 Table 104; CM_*_ATTR_ID in Linux cm_msgs.h).
type AttrID uint16

// CM attribute IDs.
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010 // ConnectRequest
	AttrMRA           AttrID = 0x0011 // MsgRcptAck
	AttrREJ           AttrID = 0x0012 // ConnectReject
	AttrREP           AttrID = 0x0013 // ConnectReply
	AttrRTU           AttrID = 0x0014 // ReadyToUse
	AttrDREQ          AttrID = 0x0015 // DisconnectRequest
	AttrDREP          AttrID = 0x0016 // DisconnectReply
	AttrSIDRREQ       AttrID = 0x0017 // ServiceIDResReq
	AttrSIDRREP       AttrID = 0x0018 // ServiceIDResReqResp
	AttrLAP           AttrID = 0x0019 // LoadAlternatePath: not implemented
	AttrAPR           AttrID = 0x001A // AlternatePathResponse: not implemented
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo",
	AttrREQ:           "REQ",
	AttrMRA:           "MRA",
	AttrREJ:           "REJ",
	AttrREP:           "REP",
	AttrRTU:           "RTU",
	AttrDREQ:          "DREQ",
	AttrDREP:          "DREP",
	AttrSIDRREQ:       "SIDR_REQ",
	AttrSIDRREP:       "SIDR_REP",
	AttrLAP:           "LAP",
	AttrAPR:           "APR",
}

// String returns the message's short IBTA name and its ID, such as
// "REQ (0x0010)".
func (a AttrID) String() string {
	if n, ok := attrNames[a]; ok {
		return fmt.Sprintf("%s (0x%04x)", n, uint16(a))
	}
	return fmt.Sprintf("0x%04x", uint16(a))
}

// MTU is the 4-bit path MTU code of a REQ (IBTA vol. 1 Table 145; enum
// ib_mtu).
type MTU uint8

// Path MTU codes. 0 and 6 to 15 are reserved.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for a reserved code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// String returns the MTU in bytes, such as "1024", or "MTU(n)" for a
// reserved code.
func (m MTU) String() string {
	if n := m.Bytes(); n != 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("MTU(%d)", uint8(m))
}

// TransportType is the 2-bit transport service type of a REQ.
type TransportType uint8

// Transport service types. TransportExtended defers to the REQ's
// ExtendedTransportType (1 = XRC).
const (
	TransportRC       TransportType = 0
	TransportUC       TransportType = 1
	TransportRD       TransportType = 2
	TransportExtended TransportType = 3
)

// String returns "RC", "UC", "RD" or "extended".
func (t TransportType) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportExtended:
		return "extended"
	}
	return fmt.Sprintf("TransportType(%d)", uint8(t))
}

// ExtendedTransportXRC is the REQ's ExtendedTransportType for XRC, with
// TransportType TransportExtended.
const ExtendedTransportXRC = 1

// MsgCode is the 2-bit code by which a REJ or an MRA names the message it
// answers (the REJ's "Message REJected" and the MRA's "Message MRAed"
// fields; CM_MSG_RESPONSE_* in Linux). Code 3 is reserved.
type MsgCode uint8

// Message codes.
const (
	MsgCodeREQ   MsgCode = 0 // the REQ
	MsgCodeREP   MsgCode = 1 // the REP
	MsgCodeOther MsgCode = 2 // REJ: no message, a timeout or a stale connection
	MsgCodeLAP   MsgCode = 2 // MRA: the LAP
)

// String returns "REQ", "REP", "other/LAP" (code 2 means "other" in a REJ
// and "LAP" in an MRA) or "MsgCode(3)".
func (c MsgCode) String() string {
	switch c {
	case MsgCodeREQ:
		return "REQ"
	case MsgCodeREP:
		return "REP"
	case MsgCodeOther:
		return "other/LAP"
	}
	return fmt.Sprintf("MsgCode(%d)", uint8(c))
}

// Failover is the 2-bit Failover Accepted field of a REP, the passive
// side's answer to the alternate path of the REQ. Code 3 is reserved.
type Failover uint8

// Failover codes.
const (
	FailoverAccepted     Failover = 0
	FailoverNotSupported Failover = 1
	FailoverRejected     Failover = 2
)

// String returns "accepted", "not supported", "rejected" or "Failover(3)".
func (f Failover) String() string {
	switch f {
	case FailoverAccepted:
		return "accepted"
	case FailoverNotSupported:
		return "not supported"
	case FailoverRejected:
		return "rejected"
	}
	return fmt.Sprintf("Failover(%d)", uint8(f))
}

// RejectReason is the reason code of a REJ (IBTA vol. 1 Table 109; enum
// ib_cm_rej_reason in Linux include/rdma/ib_cm.h).
type RejectReason uint16

// Reject reasons. Code 34 is unassigned; 35 comes with ECE (IBTA 1.4).
const (
	RejectNoQP                      RejectReason = 1
	RejectNoEEC                     RejectReason = 2
	RejectNoResources               RejectReason = 3
	RejectTimeout                   RejectReason = 4
	RejectUnsupported               RejectReason = 5 // unsupported request
	RejectInvalidCommID             RejectReason = 6
	RejectInvalidCommInstance       RejectReason = 7
	RejectInvalidServiceID          RejectReason = 8
	RejectInvalidTransportType      RejectReason = 9
	RejectStaleConn                 RejectReason = 10
	RejectRDCNotExist               RejectReason = 11
	RejectInvalidGID                RejectReason = 12
	RejectInvalidLID                RejectReason = 13
	RejectInvalidSL                 RejectReason = 14
	RejectInvalidTrafficClass       RejectReason = 15
	RejectInvalidHopLimit           RejectReason = 16
	RejectInvalidPacketRate         RejectReason = 17
	RejectInvalidAltGID             RejectReason = 18
	RejectInvalidAltLID             RejectReason = 19
	RejectInvalidAltSL              RejectReason = 20
	RejectInvalidAltTrafficClass    RejectReason = 21
	RejectInvalidAltHopLimit        RejectReason = 22
	RejectInvalidAltPacketRate      RejectReason = 23
	RejectPortCMRedirect            RejectReason = 24
	RejectPortRedirect              RejectReason = 25
	RejectInvalidMTU                RejectReason = 26
	RejectInsufficientRespResources RejectReason = 27
	RejectConsumerDefined           RejectReason = 28
	RejectInvalidRNRRetry           RejectReason = 29
	RejectDuplicateLocalCommID      RejectReason = 30
	RejectInvalidClassVersion       RejectReason = 31
	RejectInvalidFlowLabel          RejectReason = 32
	RejectInvalidAltFlowLabel       RejectReason = 33
	RejectVendorOptionNotSupported  RejectReason = 35
)

var rejectNames = [...]string{
	RejectNoQP:                      "no QP",
	RejectNoEEC:                     "no EEC",
	RejectNoResources:               "no resources",
	RejectTimeout:                   "timeout",
	RejectUnsupported:               "unsupported request",
	RejectInvalidCommID:             "invalid comm ID",
	RejectInvalidCommInstance:       "invalid comm instance",
	RejectInvalidServiceID:          "invalid service ID",
	RejectInvalidTransportType:      "invalid transport type",
	RejectStaleConn:                 "stale connection",
	RejectRDCNotExist:               "RDC does not exist",
	RejectInvalidGID:                "invalid GID",
	RejectInvalidLID:                "invalid LID",
	RejectInvalidSL:                 "invalid SL",
	RejectInvalidTrafficClass:       "invalid traffic class",
	RejectInvalidHopLimit:           "invalid hop limit",
	RejectInvalidPacketRate:         "invalid packet rate",
	RejectInvalidAltGID:             "invalid alternate GID",
	RejectInvalidAltLID:             "invalid alternate LID",
	RejectInvalidAltSL:              "invalid alternate SL",
	RejectInvalidAltTrafficClass:    "invalid alternate traffic class",
	RejectInvalidAltHopLimit:        "invalid alternate hop limit",
	RejectInvalidAltPacketRate:      "invalid alternate packet rate",
	RejectPortCMRedirect:            "port CM redirect",
	RejectPortRedirect:              "port redirect",
	RejectInvalidMTU:                "invalid MTU",
	RejectInsufficientRespResources: "insufficient responder resources",
	RejectConsumerDefined:           "consumer defined",
	RejectInvalidRNRRetry:           "invalid RNR retry count",
	RejectDuplicateLocalCommID:      "duplicate local comm ID",
	RejectInvalidClassVersion:       "invalid class version",
	RejectInvalidFlowLabel:          "invalid flow label",
	RejectInvalidAltFlowLabel:       "invalid alternate flow label",
	RejectVendorOptionNotSupported:  "vendor option not supported",
}

// String returns the reason in words, as Linux's ibcm_reject_msg does, or
// "RejectReason(n)" for an unassigned code.
func (r RejectReason) String() string {
	if int(r) < len(rejectNames) && rejectNames[r] != "" {
		return rejectNames[r]
	}
	return fmt.Sprintf("RejectReason(%d)", uint16(r))
}

// SIDRStatus is the status of a SIDR_REP (IBTA vol. 1 Table 121; enum
// ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP status codes.
const (
	SIDRSuccess            SIDRStatus = 0 // QP valid
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2 // rejected by the service provider
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // redirect: ClassPortInfo is valid
	SIDRUnsupportedVersion SIDRStatus = 5 // class version not supported
)

var sidrNames = [...]string{
	SIDRSuccess:            "success",
	SIDRUnsupported:        "service ID not supported",
	SIDRReject:             "rejected",
	SIDRNoQP:               "no QP",
	SIDRRedirect:           "redirect",
	SIDRUnsupportedVersion: "unsupported version",
}

// String returns the status in words, or "SIDRStatus(n)".
func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return sidrNames[s]
	}
	return fmt.Sprintf("SIDRStatus(%d)", uint8(s))
}
