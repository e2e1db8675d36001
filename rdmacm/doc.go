// Package rdmacm is the RDMA connection manager: librdmacm's API over
// rdmago's devices, speaking on the wire what Linux's rdma_cm speaks over
// RoCEv2, so that a Go program connects to kernel rdma_cm peers (rping,
// perftest -R, NFS/RDMA ...) and they to it.
//
// An ID (struct rdma_cm_id) is the counterpart of a socket. The active
// side resolves the peer's address and route, creates its QP on the ID and
// connects; the passive side binds, listens, and accepts the requests that
// arrive as CONNECT_REQUEST events with a new ID each:
//
//	client                                 server
//	CreateEventChannel                     CreateEventChannel
//	CreateID(ch, ctx, PSTCP)               CreateID(ch, ctx, PSTCP)
//	ResolveAddr -> ADDR_RESOLVED           BindAddr
//	ResolveRoute -> ROUTE_RESOLVED         Listen
//	CreateQP                                         <- CONNECT_REQUEST (new ID)
//	Connect            --- REQ --->        CreateQP, Accept
//	                   <--- REP ---
//	ESTABLISHED        --- RTU --->        ESTABLISHED
//	... verbs on ID.QP(), or the rdma_verbs wrappers (PostSend, GetSendComp) ...
//	Disconnect         --- DREQ -->        DISCONNECTED
//	DISCONNECTED       <-- DREP ---        Disconnect
//	Destroy                                Destroy
//
// IDs created without a channel are synchronous, as in librdmacm: the
// calls above wait for their event and return failures as errors, and a
// listening ID hands out requests with GetRequest. GetAddrInfo and CreateEP
// shorten the setup, and Dial and Listen do all of it for the common case
// of one RC connection.
//
// # On the wire
//
// Each device has a connection manager agent that owns its QP1 (the GSI
// QP) and exchanges InfiniBand CM MADs (package mad) with peers' QP1s:
// REQ, MRA, REJ, REP, RTU, DREQ and DREP for connections, SIDR_REQ and
// SIDR_REP for the UDP port space, whose datagram QPs use Q_Key UDPQKey.
// The REQ's private data starts with rdma_cm's header (the IP addresses
// and the client's port); the service ID is the port space and the port.
// Every request is resent until answered, each after the peer's response
// time plus two packet lifetimes (CMResponseTimeout is 20: about 4.3 s),
// MaxCMRetries (15) times, as Linux's rdma_cm does; SetCMTimeouts changes
// both for one ID. Duplicate messages are answered again (a lost RTU, REP
// or DREP is resent when its request comes again; a REQ still awaiting the
// application gets an MRA), and messages for unknown connections are
// answered as the IB CM answers them: a REQ for a port nobody listens on
// with REJ reason 8 (invalid service ID), a REQ from a QP still connected
// here with reason 10 (stale connection), a REP for no connection with
// reason 6 (invalid communication ID), a DREQ for no connection with a
// DREP.
//
// # Multicast
//
// A datagram ID bound to a device joins an IP multicast group with
// JoinMulticast; its MULTICAST_JOIN event gives the address vector, QP
// number and Q_Key that reach the group, and the ID's QP is attached to
// it so that it receives the group's datagrams. RoCE has no subnet
// manager: the group's GID is its IP address (an IPv4 group mapped into
// IPv6), and the device joins the IP group on its network when its
// first QP attaches, so the datagrams travel as UDP to the group's
// address. Linux peers interoperate over IPv4; Linux's rdma_cm refuses
// IPv6 groups on RoCE.
//
// # Devices with a connection manager of their own
//
// An ID's calls are carried out by a connection manager, a Backend. On
// the software device, and any device whose provider registered none,
// it is this package's own IB CM, which runs on the device's QP1. On
// rdma-core devices (package rdmacore, built with -tags rdmacore) the
// kernel owns QP1 and runs rdma_cm itself: there an ID is a kernel
// rdma_cm ID driven through librdmacm, with the same calls and events
// and the kernel's messages on the wire. Which one serves an ID follows
// from its device, known once it is bound or its address is resolved.
//
// # C to Go
//
//	rdma_create_event_channel   CreateEventChannel
//	rdma_get_cm_event           (*EventChannel).GetEvent; in a select: Ready, then PollEvent
//	                            (where C polls the channel's fd)
//	rdma_ack_cm_event           (*Event).Ack
//	rdma_event_str              EventType.String
//	rdma_destroy_event_channel  (*EventChannel).Close
//	rdma_create_id              CreateID
//	rdma_destroy_id             (*ID).Destroy
//	rdma_bind_addr              (*ID).BindAddr
//	rdma_resolve_addr           (*ID).ResolveAddr
//	rdma_resolve_route          (*ID).ResolveRoute
//	rdma_listen                 (*ID).Listen
//	rdma_get_request            (*ID).GetRequest
//	rdma_connect                (*ID).Connect
//	rdma_accept                 (*ID).Accept
//	rdma_reject                 (*ID).Reject
//	rdma_establish              (*ID).Establish
//	rdma_disconnect             (*ID).Disconnect
//	rdma_migrate_id             (*ID).Migrate
//	rdma_create_qp              (*ID).CreateQP
//	rdma_destroy_qp             (*ID).DestroyQP
//	rdma_create_srq             (*ID).CreateSRQ; rdma_destroy_srq: (*ID).DestroySRQ
//	rdma_get_devices            GetDevices; rdma_free_devices: (*DeviceList).Free
//	rdma_join_multicast(_ex)    (*ID).JoinMulticast, JoinMulticastEx
//	rdma_leave_multicast        (*ID).LeaveMulticast
//	rdma_init_qp_attr           (*ID).InitQPAttr
//	rdma_set_option             (*ID).SetTOS, SetReuseAddr, SetACKTimeout
//	rdma_get_local_addr         (*ID).LocalAddr
//	rdma_get_peer_addr          (*ID).PeerAddr
//	id->verbs, id->qp, id->pd   (*ID).Verbs, QP, PD, SendCQ, RecvCQ
//	rdma_getaddrinfo            GetAddrInfo
//	rdma_create_ep              CreateEP
//	rdma_reg_msgs, _read, _write (*ID).RegMsgs, RegRead, RegWrite
//	rdma_post_send, _recv ...   (*ID).PostSend, PostRecv, PostRead, PostWrite, PostUDSend (and ...v)
//	rdma_get_send_comp          (*ID).GetSendComp
//	rdma_get_recv_comp          (*ID).GetRecvComp
//
// # Devices
//
// Address resolution finds the device whose GID table holds the local
// address: the source address given, or the one the host's routing table
// picks for the destination. The devices searched are those
// RegisterDevice names and those verbs.Devices lists (the rxe provider's
// one per network interface, with the addresses RDMAGO_RXE_ADDR selects).
// The software devices are shared by the processes of a host, as the
// kernel's are: a server and its clients may all be on 127.0.0.1. A
// listener claims its service on the device for its process, so a second
// process listening on the same port and address fails with
// verbs.ErrAddrInUse, as rdma_listen fails with EADDRINUSE.
package rdmacm
