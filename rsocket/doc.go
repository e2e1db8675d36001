// Package rsocket is net.Conn over RDMA: byte streams that speak
// librdmacm's rsockets protocol, so that a Go program and a C program
// using rsockets (rsocket, rconnect, raccept, rsend, rrecv, riomap,
// riowrite; rdma-core's rstream and riostream) connect to each other.
//
// A Conn is an RC queue pair made with the connection manager (package
// rdmacm) in its TCP port space: an rsocket port is an rdma_cm port,
// not a kernel TCP port, and no TCP connection is made. It runs on any
// verbs device: the software RoCE device of package rxe, or hardware
// through package rdmacore.
//
//	l, err := rsocket.Listen("tcp", ":7471")          // rsocket, rbind, rlisten
//	c, err := l.Accept()                               // raccept
//	c, err := rsocket.Dial(ctx, "tcp", "host:7471")    // rsocket, rconnect
//
// Conns work wherever a net.Conn does: net/http (Listener for
// http.Server.Serve, Dialer.DialContext for http.Transport), crypto/tls
// over a Conn, io.Copy. Deadlines end blocked reads and writes with an
// error wrapping os.ErrDeadlineExceeded; CloseWrite sends rsockets'
// shutdown, so that the peer reads io.EOF; Close sends its disconnect,
// then disconnects the queue pair. io.Copy to and from a Conn goes
// through ReadFrom and WriteTo, which read into the registered send
// buffer and write out of the receive ring, saving a copy each.
//
// # On the wire
//
// Each side registers a receive ring and a two-entry target SGL array,
// and names both in the 40-byte connection data of the connection
// request and reply (ConnData): protocol version 1, the credits it
// gives (its receive queue size), the SGL array, and the first half of
// its ring. Data goes as RDMA WRITE WITH IMMEDIATE into the part of the
// peer's ring the peer gave, in chunks of up to 64 KiB; the
// immediate says what a message is (its top three bits) and how long
// (the rest). As the reader frees its ring it writes the freed half into
// the writer's SGL array and returns credits in the same message. A
// zero-length RDMA WRITE serves as keepalive, and as the probe that finds
// a vanished peer while a Read or Write waits (see Config.KeepAlive; C's
// rsockets send their keepalive with an immediate). Receives carry no memory:
// every write lands where its sender aimed it.
//
// # Waiting
//
// A Conn has no goroutine taking its completions, as rsockets have no
// thread: a Read or Write that must wait polls the completion queue
// itself for Config.PollTime (50 µs by default; rsockets' polling_time),
// then sleeps on it. On the software device (package rxe) these polls
// run the device on the waiting goroutine (verbs.ProgressManual, which a
// Conn sets on its device context), so a ping-pong whose answer comes
// within the poll costs no goroutine wake-up at all: that is what makes
// a 64-byte round trip several times faster than kernel TCP's between
// two processes. At most GOMAXPROCS goroutines of a process poll at
// once, and a connection that waits longer sleeps, using no CPU.
//
// # Iomaps
//
// With Config.IOMapSize (RDMA_IOMAPSIZE) a side keeps a target iomap:
// an array of 24-byte entries after its SGL array, in the same
// registered memory, whose size the connection data carries. IOMap
// (riomap) registers a buffer and writes an entry naming it into the
// peer's array, with an RDMA WRITE WITH IMMEDIATE whose immediate says
// which entry; the peer's IOWrite (riowrite) then puts data straight
// into that buffer with plain RDMA WRITEs, and its owner learns of it
// from the data itself, or from a Write sent after it. rdma-core's
// riostream and `rdmago riostream` work so, with each other.
//
// What is left out: datagram rsockets (SOCK_DGRAM), AF_IB addresses,
// and iWARP's send-based messages.
//
// # C to Go
//
//	rsocket + rconnect           Dial, Dialer.Dial
//	rsocket + rbind + rlisten    Listen, ListenConfig.Listen
//	raccept                      Listener.Accept, Listener.AcceptRsocket
//	rsend, rwrite                Conn.Write
//	rrecv, rread                 Conn.Read
//	rshutdown(SHUT_WR)           Conn.CloseWrite
//	rclose                       Conn.Close, Listener.Close
//	rgetsockname, rgetpeername   Conn.LocalAddr, Conn.RemoteAddr
//	SO_RCVBUF, SO_SNDBUF         Config.RecvBuffer, Config.SendBuffer
//	RDMA_SQSIZE, RDMA_RQSIZE     Config.QueueSize
//	RDMA_INLINE                  Config.InlineSize
//	SO_KEEPALIVE, TCP_KEEPIDLE   Config.KeepAlive
//	SO_RCVTIMEO, SO_SNDTIMEO     Conn.SetReadDeadline, Conn.SetWriteDeadline
//	rsetsockopt on a listener    Listener.SetConfig
//	RDMA_IOMAPSIZE               Config.IOMapSize
//	riomap, riounmap             Conn.IOMap, Conn.IOUnmap
//	riowrite                     Conn.IOWrite
package rsocket
