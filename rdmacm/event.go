package rdmacm

import (
	"fmt"

	"github.com/rdmago/rdmago/verbs"
)

// PortSpace is an rdma_cm port space (enum rdma_port_space): it picks the
// QP type and the range of service IDs an ID's port maps to.
type PortSpace uint16

// Port spaces, with librdmacm's values.
const (
	PSIPoIB PortSpace = 0x0002 // RDMA_PS_IPOIB
	PSIB    PortSpace = 0x013F // RDMA_PS_IB: RC or UD, chosen by the QP
	PSTCP   PortSpace = 0x0106 // RDMA_PS_TCP: reliable connections (RC)
	PSUDP   PortSpace = 0x0111 // RDMA_PS_UDP: datagrams (UD), resolved with SIDR
)

// String returns librdmacm's name of the port space ("RDMA_PS_TCP").
func (ps PortSpace) String() string {
	switch ps {
	case PSIPoIB:
		return "RDMA_PS_IPOIB"
	case PSIB:
		return "RDMA_PS_IB"
	case PSTCP:
		return "RDMA_PS_TCP"
	case PSUDP:
		return "RDMA_PS_UDP"
	}
	return fmt.Sprintf("RDMA_PS_%#04x", uint16(ps))
}

func (ps PortSpace) valid() bool {
	switch ps {
	case PSIPoIB, PSIB, PSTCP, PSUDP:
		return true
	}
	return false
}

// UDPQKey is the Q_Key of the UD QPs rdma_cm sets up (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// EventType is the type of a connection manager event (enum
// rdma_cm_event_type, with the same numbers).
type EventType int

// Event types.
const (
	EventAddrResolved    EventType = 0  // RDMA_CM_EVENT_ADDR_RESOLVED
	EventAddrError       EventType = 1  // RDMA_CM_EVENT_ADDR_ERROR
	EventRouteResolved   EventType = 2  // RDMA_CM_EVENT_ROUTE_RESOLVED
	EventRouteError      EventType = 3  // RDMA_CM_EVENT_ROUTE_ERROR
	EventConnectRequest  EventType = 4  // RDMA_CM_EVENT_CONNECT_REQUEST
	EventConnectResponse EventType = 5  // RDMA_CM_EVENT_CONNECT_RESPONSE
	EventConnectError    EventType = 6  // RDMA_CM_EVENT_CONNECT_ERROR
	EventUnreachable     EventType = 7  // RDMA_CM_EVENT_UNREACHABLE
	EventRejected        EventType = 8  // RDMA_CM_EVENT_REJECTED
	EventEstablished     EventType = 9  // RDMA_CM_EVENT_ESTABLISHED
	EventDisconnected    EventType = 10 // RDMA_CM_EVENT_DISCONNECTED
	EventDeviceRemoval   EventType = 11 // RDMA_CM_EVENT_DEVICE_REMOVAL
	EventMulticastJoin   EventType = 12 // RDMA_CM_EVENT_MULTICAST_JOIN
	EventMulticastError  EventType = 13 // RDMA_CM_EVENT_MULTICAST_ERROR
	EventAddrChange      EventType = 14 // RDMA_CM_EVENT_ADDR_CHANGE
	EventTimewaitExit    EventType = 15 // RDMA_CM_EVENT_TIMEWAIT_EXIT
)

var eventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED",
	"RDMA_CM_EVENT_ADDR_ERROR",
	"RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR",
	"RDMA_CM_EVENT_CONNECT_REQUEST",
	"RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR",
	"RDMA_CM_EVENT_UNREACHABLE",
	"RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED",
	"RDMA_CM_EVENT_DISCONNECTED",
	"RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN",
	"RDMA_CM_EVENT_MULTICAST_ERROR",
	"RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

// String returns the event's name as rdma_event_str does
// ("RDMA_CM_EVENT_ESTABLISHED").
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "UNKNOWN EVENT"
}

// ConnParam holds the parameters of a connection (struct
// rdma_conn_param): what Connect and Accept offer, and what the peer
// offered in CONNECT_REQUEST and ESTABLISHED events.
type ConnParam struct {
	// PrivateData is sent with the REQ (at most 56 bytes after rdma_cm's
	// header), REP (196), REJ (148) or SIDR_REQ (180). In events it is
	// the whole private data area of the message received.
	PrivateData []byte
	// ResponderResources is how many RDMA READ and atomic requests the
	// local QP accepts at once (its max_dest_rd_atomic).
	ResponderResources uint8
	// InitiatorDepth is how many it issues at once (its max_rd_atomic).
	InitiatorDepth uint8
	FlowControl    uint8
	RetryCount     uint8 // transport retries (3 bits); ignored by Accept
	RNRRetryCount  uint8 // RNR retries asked of the peer (3 bits; 7 = for ever)
	SRQ            uint8
	// QPNum is the QP number to advertise when the ID has no QP of its
	// own (the user created and moves the QP).
	QPNum uint32
}

// UDParam holds what a datagram (UDP port space) peer resolved to (struct
// rdma_ud_param): the remote QP, its Q_Key and how to reach it.
type UDParam struct {
	PrivateData []byte
	AHAttr      verbs.AHAttr
	QPNum       uint32
	QKey        uint32
	// Context is, for MULTICAST_JOIN and MULTICAST_ERROR, the context
	// given to JoinMulticast (librdmacm passes it as private_data).
	Context any
}

// Event is a connection manager event (struct rdma_cm_event).
type Event struct {
	Type EventType
	// ID is the ID the event is for; for CONNECT_REQUEST, the new ID of
	// the incoming connection.
	ID *ID
	// ListenID is, for CONNECT_REQUEST, the listening ID.
	ListenID *ID
	// Status is 0 on success; a negative errno (-110 for ETIMEDOUT) for
	// errors; for REJECTED the IB CM reject reason (8: no such service,
	// 28: rejected by the peer's application).
	Status int
	// Param is the connection's parameters and private data (connected
	// port spaces).
	Param ConnParam
	// UD is what a datagram ID resolved to (UDP port space).
	UD UDParam
}

// Err returns nil if the event reports success, or an error naming the
// event and its status.
func (e *Event) Err() error {
	if e.Status == 0 {
		return nil
	}
	return &EventError{Type: e.Type, Status: e.Status}
}

// Ack acknowledges the event (rdma_ack_cm_event). Go frees events by
// garbage collection, so Ack releases nothing; it exists so that code
// written after the C flow reads the same, and acking twice is harmless.
func (e *Event) Ack() {}

// EventError is the error of an event that reports a failure.
type EventError struct {
	Type   EventType
	Status int
}

func (e *EventError) Error() string {
	s := fmt.Sprintf("rdmacm: %s, error %d", e.Type, e.Status)
	if e.Type == EventRejected {
		return s + " (connection refused: " + rejectReasonString(e.Status) + ")"
	}
	if e.Status < 0 {
		return s + " (" + verbs.Errno(-e.Status).Error() + ")"
	}
	return s
}

// Unwrap returns the errno of a negative status, so that
// errors.Is(err, verbs.ErrTimedOut) works, and verbs.ErrConnRefused for a
// rejection (whose status is the IB CM reason: 8 when nobody listens, 28
// when the peer's application rejected), as librdmacm's synchronous calls
// set errno to ECONNREFUSED then.
func (e *EventError) Unwrap() error {
	if e.Type == EventRejected {
		return verbs.ErrConnRefused
	}
	if e.Status < 0 {
		return verbs.Errno(-e.Status)
	}
	return nil
}
