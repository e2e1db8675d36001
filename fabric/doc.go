// Package fabric is libfabric's API in Go: fi_getinfo and the objects it
// leads to (fabric, domain, event queue, completion queue, memory
// regions, passive and active endpoints), over providers that register
// themselves as verbs providers do. Package fabric/tcp is the tcp
// provider, wire-compatible with libfabric 1.17's, so a Go program and a
// C libfabric program (fi_pingpong -p tcp -e msg) talk to each other;
// package fabric/vrb is the verbs provider, RDMA over rdma_cm on any
// verbs device, wire-compatible with libfabric's verbs provider; package
// fabric/udp is the udp provider, datagrams over UDP sockets as C's.
//
// The flow is libfabric's:
//
//	server                                 client
//	GetInfo(hints: FI_EP_MSG, FI_SOURCE)   GetInfo(hints: dest address)
//	OpenFabric, OpenEQ                     OpenFabric, OpenEQ
//	OpenPassiveEndpoint, Bind, Listen      OpenDomain, OpenCQ, OpenEndpoint
//	                                       BindEQ, BindCQ, Enable, Recv
//	                        <- CONNREQ --  Connect(name, private data)
//	EQ.SRead: FI_CONNREQ (info, data)
//	OpenDomain(info), OpenCQ,
//	OpenEndpoint(info), Bind..., Recv
//	Accept(data)            -- CONNRESP -> EQ.SRead: FI_CONNECTED
//	EQ.SRead: FI_CONNECTED
//	... Send / Recv / Write / Read, CQ.Read or CQ.SRead ...
//	Shutdown, Close                        EQ: FI_SHUTDOWN; Close
//
// Completions carry the context given with each operation. Errors are
// libfabric's numbers (Errno, with fi_strerror's texts): ErrAgain when a
// queue is full or empty, ErrAvail when an error entry waits for ReadErr,
// ErrTrunc for a message longer than its buffer, ErrCanceled for what was
// outstanding when an endpoint closed, ErrNoData when GetInfo matches
// nothing. Every call's error works with errors.Is.
//
// # Progress
//
// CQ.Read drives the progress of the endpoints bound to the CQ before it
// looks for completions, so a program that polls, as fi_pingpong does,
// moves its own data with no goroutine in between (libfabric's manual
// progress). Providers may also progress in the background (the tcp
// provider does, reporting FI_PROGRESS_AUTO as C's does): a peer's RMA
// read is answered and a large send drains while the program computes,
// and SRead sleeps until a completion arrives.
//
// # C to Go
//
//	fi_getinfo, fi_freeinfo       GetInfo (Infos are garbage collected)
//	fi_dupinfo, fi_allocinfo      (*Info).Dup, AllocInfo
//	fi_fabric                     OpenFabric
//	fi_domain                     (*Fabric).OpenDomain
//	fi_eq_open                    (*Fabric).OpenEQ
//	fi_eq_read, fi_eq_sread       (*EQ).Read, SRead (timeout: a context)
//	fi_eq_readerr, fi_eq_write    (*EQ).ReadErr, Write
//	fi_cq_open                    (*Domain).OpenCQ
//	fi_cq_read, fi_cq_sread       (*CQ).Read, SRead
//	fi_cq_readerr                 (*CQ).ReadErr
//	fi_mr_reg, fi_mr_key, fi_mr_desc (*Domain).RegMR, (*MR).Key, Desc
//	fi_passive_ep                 (*Fabric).OpenPassiveEndpoint
//	fi_pep_bind, fi_listen        PassiveEndpoint.Bind, Listen
//	fi_reject                     PassiveEndpoint.Reject
//	fi_endpoint                   (*Domain).OpenEndpoint
//	fi_ep_bind                    Endpoint.BindEQ, BindCQ
//	fi_enable                     Endpoint.Enable
//	fi_connect, fi_accept         Endpoint.Connect, Accept
//	fi_shutdown                   Endpoint.Shutdown
//	fi_getname, fi_getpeer        Name, Peer
//	fi_send, fi_senddata          Endpoint.Send, SendData
//	fi_inject, fi_sendmsg         Endpoint.Inject, SendMsg
//	fi_recv                       Endpoint.Recv
//	fi_write, fi_writedata        Endpoint.Write, WriteData
//	fi_read                       Endpoint.Read
//	fi_inject_write               Endpoint.InjectWrite
//	fi_atomic, fi_fetch_atomic    Endpoint.Atomic, FetchAtomic
//	fi_compare_atomic             Endpoint.CompareAtomic
//	fi_atomicvalid (and fetch_, compare_) Endpoint.AtomicValid, ...
//	enum fi_datatype, enum fi_op  Datatype, AtomicOp
//	fi_getopt, fi_setopt          Endpoint.GetOpt, SetOpt
//	fi_mr_reg's address (VIRT_ADDR) (*MR).Addr
//	fi_close                      Close
//	fi_strerror                   StrError, Errno.Error
//	fi_tostr(FI_TYPE_INFO)        (*Info).String
//
//	fi_av_open, fi_av_insert      (*Domain).OpenAV, (*AV).Insert
//	fi_av_insertsvc, fi_av_lookup (*AV).InsertSvc, Lookup
//	fi_av_remove                  (*AV).Remove
//	fi_cntr_open                  (*Domain).OpenCounter
//	fi_cntr_add, fi_cntr_set      (*Counter).Add, Set (AddErr, SetErr)
//	fi_cntr_read, fi_cntr_readerr (*Counter).Read, ReadErr
//	fi_cntr_wait                  (*Counter).Wait
//	fi_ep_bind with a counter     Endpoint.BindCounter
//	fi_tsend, fi_trecv            Endpoint.TSend, TRecv
//	fi_tinject, fi_tsendmsg       Endpoint.TInject, TSendMsg
//	fi_cq_readfrom                (*CQ).ReadFrom; CQEntry.Source
//
// Not here: fi_join and FI_MULTICAST, scalable endpoints and shared
// contexts (fi_scalable_ep, fi_stx_context, fi_srx_context), wait sets
// and poll sets (a CQ's Wait serves instead), and triggered
// operations.
package fabric
