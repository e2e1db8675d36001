// Command rdma_rc_example is RDMA_RC_example, the verbs program of the
// Mellanox "RDMA Aware Networks Programming User Manual" (chapter 7) that
// the seed notes walk through (002), as a server and a client in two
// processes. The sides meet over TCP, exchange what each needs to reach
// the other's QP and buffer, connect their RC QPs by hand (INIT, RTR, RTS)
// and then the server SENDs a message, the client RDMA READs the server's
// buffer and RDMA WRITEs a new message into it, with a sync over the
// socket between the steps. `rdmago demo` plays the same flow, and more,
// with both sides in one process.
//
// The flow, with the C functions and the verbs each calls:
//
//	main              getopt_long, print_config, resources_init,
//	                  resources_create, connect_qp, then the operations
//	                  below, resources_destroy, "test result is N"
//	resources_create  sock_connect (TCP: the server listens and accepts,
//	                  the client connects), ibv_get_device_list (the -d
//	                  device, or the first), ibv_open_device,
//	                  ibv_free_device_list, ibv_query_port, ibv_alloc_pd,
//	                  ibv_create_cq (1 entry), a 64-byte buffer (the
//	                  server's holds "SEND operation "), ibv_reg_mr
//	                  (local write, remote read and write), ibv_create_qp
//	                  (RC, every send signaled)
//	connect_qp        ibv_query_gid (-g), sock_sync_data of struct
//	                  cm_con_data_t (address, rkey, QP number, LID, GID, in
//	                  network byte order), modify_qp_to_init, post_receive
//	                  (client), modify_qp_to_rtr (the peer's QP number, LID
//	                  and, with a GID index, a GRH to its GID),
//	                  modify_qp_to_rts, sock_sync_data "Q"
//	operations        server: post_send SEND; both: poll_completion; client
//	                  prints the message; server puts "RDMA read operation "
//	                  in its buffer; sock_sync_data "R"; client: post_send
//	                  RDMA_READ, poll_completion, prints the server's
//	                  buffer, post_send RDMA_WRITE of "RDMA write
//	                  operation", poll_completion; sock_sync_data "W";
//	                  server prints its buffer
//	poll_completion   ibv_poll_cq until a completion comes, for at most
//	                  MAX_POLL_CQ_TIMEOUT (2 s)
//	resources_destroy ibv_destroy_qp, ibv_dereg_mr, ibv_destroy_cq,
//	                  ibv_dealloc_pd, ibv_close_device, close
//
// Usage:
//
//	rdma_rc_example [-p port] [-d device] [-i ib-port] [-g gid-index]           (server)
//	rdma_rc_example [-p port] [-d device] [-i ib-port] [-g gid-index] server    (client)
//
// -p (--port) is the TCP port, 19875 by default; -d (--ib-dev) the RDMA
// device, by default the first found; -i (--ib-port) its port, 1 by
// default; -g (--gid-idx) the GID index for the GRH. As in C, no -g means
// no GRH, which InfiniBand allows; RoCE needs one, so on a RoCE port the
// program then takes the port's first IPv4 GID (or GID 0) and says so.
// Each side exits 0 when the test passed and 1 when it did not.
//
// rdmago's software RDMA device is shared by every process on the host, as
// Linux Soft-RoCE's is, so server and client run side by side:
//
//	go run ./examples/rdma_rc_example &
//	go run ./examples/rdma_rc_example 127.0.0.1
package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/internal/rcexample"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
	"github.com/rdmago/rdmago/verbs"
)

const (
	maxPollCQTimeout = 2000 * time.Millisecond // MAX_POLL_CQ_TIMEOUT
	msg              = "SEND operation "
	rdmaMsgR         = "RDMA read operation "
	rdmaMsgW         = "RDMA write operation"
	msgSize          = 64 // MSG_SIZE
)

// config is struct config_t: what the command line set.
type config struct {
	devName    string // -d: IB device name ("" : the first found)
	serverName string // the operand: the server to connect to ("": be the server)
	tcpPort    int    // -p: server TCP port
	ibPort     uint8  // -i: local IB port to work with
	gidIdx     int    // -g: GID index to use (-1: none)
}

// resources is struct resources: everything the test holds.
type resources struct {
	portAttr    verbs.PortAttr    // IB port attributes
	remoteProps rcexample.ConData // values to connect to the remote side
	ibCtx       *verbs.Context    // device handle
	pd          *verbs.PD         // PD handle
	cq          *verbs.CQ         // CQ handle
	qp          *verbs.QP         // QP handle
	mr          *verbs.MR         // MR handle for buf
	buf         []byte            // memory buffer for RDMA and SEND operations
	sock        net.Conn          // TCP socket to the remote side
}

var cfg = config{tcpPort: 19875, ibPort: 1, gidIdx: -1}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	opts, operands, err := getopt.Parse(args, "p:d:i:g:", []getopt.Long{
		{Name: "port", HasArg: true, Short: 'p'},
		{Name: "ib-dev", HasArg: true, Short: 'd'},
		{Name: "ib-port", HasArg: true, Short: 'i'},
		{Name: "gid-idx", HasArg: true, Short: 'g'},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdma_rc_example: %v\n", err)
		usage()
		return 1
	}
	for _, o := range opts {
		var n int
		switch o.Name {
		case 'p':
			n, err = o.Int(1, 65535)
			cfg.tcpPort = n
		case 'd':
			cfg.devName = o.Arg
		case 'i':
			n, err = o.Int(1, 255)
			cfg.ibPort = uint8(n)
		case 'g':
			n, err = o.Int(0, 1<<20)
			cfg.gidIdx = n
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "rdma_rc_example: %v\n", err)
			usage()
			return 1
		}
	}
	switch len(operands) {
	case 0:
	case 1:
		cfg.serverName = operands[0]
	default:
		usage()
		return 1
	}
	printConfig()

	var res resources // resources_init
	rc := 1
	if err := res.create(); err != nil {
		fmt.Fprintf(os.Stderr, "failed to create resources: %v\n", err)
	} else if err := res.connectQP(); err != nil {
		fmt.Fprintf(os.Stderr, "failed to connect QPs: %v\n", err)
	} else if err := res.operations(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		rc = 0
	}
	if err := res.destroy(); err != nil {
		fmt.Fprintf(os.Stderr, "failed to destroy resources: %v\n", err)
		rc = 1
	}
	fmt.Printf("\ntest result is %d\n", rc)
	return rc
}

func usage() {
	fmt.Fprintln(os.Stderr, "Usage:")
	fmt.Fprintln(os.Stderr, "  rdma_rc_example            start a server and wait for a connection")
	fmt.Fprintln(os.Stderr, "  rdma_rc_example <host>     connect to the server at <host>")
	fmt.Fprintln(os.Stderr)
	fmt.Fprintln(os.Stderr, "Options:")
	getopt.PrintUsage(os.Stderr, []getopt.Spec{
		{Short: 'p', Long: "port", Arg: "port", Usage: "listen on or connect to TCP port <port>", Default: "19875"},
		{Short: 'd', Long: "ib-dev", Arg: "dev", Usage: "use RDMA device <dev>", Default: "the first found"},
		{Short: 'i', Long: "ib-port", Arg: "port", Usage: "use port <port> of the device", Default: "1"},
		{Short: 'g', Long: "gid-idx", Arg: "index", Usage: "GID index to use in the GRH", Default: "none; the first IPv4 GID on RoCE"},
	})
}

// printConfig prints the configuration (print_config).
func printConfig() {
	fmt.Println(" ------------------------------------------------")
	fmt.Printf(" Device name : %q\n", cfg.devName)
	fmt.Printf(" IB port : %d\n", cfg.ibPort)
	if cfg.serverName != "" {
		fmt.Printf(" IP : %s\n", cfg.serverName)
	}
	fmt.Printf(" TCP port : %d\n", cfg.tcpPort)
	if cfg.gidIdx >= 0 {
		fmt.Printf(" GID index : %d\n", cfg.gidIdx)
	}
	fmt.Println(" ------------------------------------------------")
	fmt.Println()
}

// sockConnect connects to the server's TCP port, or as the server listens
// on it for one client and accepts it (sock_connect).
func sockConnect(serverName string, port int) (net.Conn, error) {
	if serverName != "" {
		return net.Dial("tcp", net.JoinHostPort(serverName, strconv.Itoa(port)))
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	defer ln.Close() // one client: C closes the listening socket after accept
	return ln.Accept()
}

// create sets up the TCP connection, the device and the verbs objects
// (resources_create).
func (r *resources) create() error {
	var err error
	if cfg.serverName != "" {
		if r.sock, err = sockConnect(cfg.serverName, cfg.tcpPort); err != nil {
			return fmt.Errorf("failed to establish TCP connection to server %s, port %d: %w", cfg.serverName, cfg.tcpPort, err)
		}
	} else {
		fmt.Printf("waiting on port %d for TCP connection\n", cfg.tcpPort)
		if r.sock, err = sockConnect("", cfg.tcpPort); err != nil {
			return fmt.Errorf("failed to establish TCP connection with client on port %d: %w", cfg.tcpPort, err)
		}
	}
	fmt.Println("TCP connection was established")

	fmt.Println("searching for IB devices in host")
	devList, err := verbs.Devices() // ibv_get_device_list
	if err != nil {
		return fmt.Errorf("failed to get IB devices list: %w", err)
	}
	if len(devList) == 0 {
		return errors.New("found 0 device(s)")
	}
	fmt.Printf("found %d device(s)\n", len(devList))
	var ibDev *verbs.Device
	for _, d := range devList {
		if cfg.devName == "" {
			cfg.devName = d.Name()
			fmt.Printf("device not specified, using first one found: %s\n", cfg.devName)
		}
		if d.Name() == cfg.devName {
			ibDev = d
			break
		}
	}
	if ibDev == nil {
		return fmt.Errorf("IB device %s wasn't found", cfg.devName)
	}
	if r.ibCtx, err = ibDev.Open(); err != nil { // ibv_open_device
		return fmt.Errorf("failed to open device %s: %w", cfg.devName, err)
	}
	if r.portAttr, err = r.ibCtx.QueryPort(cfg.ibPort); err != nil { // ibv_query_port
		return fmt.Errorf("ibv_query_port on port %d failed: %w", cfg.ibPort, err)
	}
	if r.pd, err = r.ibCtx.AllocPD(); err != nil { // ibv_alloc_pd
		return fmt.Errorf("ibv_alloc_pd failed: %w", err)
	}
	const cqSize = 1                                              // each side has one work request outstanding at a time
	if r.cq, err = r.ibCtx.CreateCQ(cqSize, nil, 0); err != nil { // ibv_create_cq
		return fmt.Errorf("failed to create CQ with %d entries: %w", cqSize, err)
	}
	r.buf = make([]byte, msgSize)
	if cfg.serverName == "" {
		copy(r.buf, msg)
		fmt.Printf("going to send the message: '%s'\n", cstr(r.buf))
	}
	mrFlags := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	if r.mr, err = r.pd.RegMR(r.buf, mrFlags); err != nil { // ibv_reg_mr
		return fmt.Errorf("ibv_reg_mr failed with mr_flags=0x%x: %w", uint32(mrFlags), err)
	}
	fmt.Printf("MR was registered with addr=0x%x, lkey=0x%x, rkey=0x%x, flags=0x%x\n",
		r.mr.Addr(), r.mr.LKey(), r.mr.RKey(), uint32(mrFlags))
	r.qp, err = r.pd.CreateQP(&verbs.QPInitAttr{ // ibv_create_qp
		QPType:   verbs.QPTRC,
		SQSigAll: true,
		SendCQ:   r.cq,
		RecvCQ:   r.cq,
		Cap:      verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		return fmt.Errorf("failed to create QP: %w", err)
	}
	fmt.Printf("QP was created, QP number=0x%x\n", r.qp.Num())
	return nil
}

// destroy frees everything create made (resources_destroy).
func (r *resources) destroy() error {
	var errs []error
	if r.qp != nil {
		if err := r.qp.Destroy(); err != nil { // ibv_destroy_qp
			errs = append(errs, fmt.Errorf("failed to destroy QP: %w", err))
		}
	}
	if r.mr != nil {
		if err := r.mr.Dereg(); err != nil { // ibv_dereg_mr
			errs = append(errs, fmt.Errorf("failed to deregister MR: %w", err))
		}
	}
	if r.cq != nil {
		if err := r.cq.Destroy(); err != nil { // ibv_destroy_cq
			errs = append(errs, fmt.Errorf("failed to destroy CQ: %w", err))
		}
	}
	if r.pd != nil {
		if err := r.pd.Dealloc(); err != nil { // ibv_dealloc_pd
			errs = append(errs, fmt.Errorf("failed to deallocate PD: %w", err))
		}
	}
	if r.ibCtx != nil {
		if err := r.ibCtx.Close(); err != nil { // ibv_close_device
			errs = append(errs, fmt.Errorf("failed to close device context: %w", err))
		}
	}
	if r.sock != nil {
		if err := r.sock.Close(); err != nil {
			errs = append(errs, fmt.Errorf("failed to close socket: %w", err))
		}
	}
	return errors.Join(errs...)
}

// syncByte keeps the sides in step with one byte each way
// (sock_sync_data of a dummy character).
func (r *resources) syncByte(tag byte) error {
	got, err := rcexample.SyncData(r.sock, []byte{tag})
	if err != nil {
		return err
	}
	if got[0] != tag {
		return fmt.Errorf("out of step with the peer: sent %q, got %q", tag, got[0])
	}
	return nil
}

// connectQP exchanges the connection data and brings the QP to RTS
// (connect_qp).
func (r *resources) connectQP() error {
	var myGID verbs.GID
	picked := false
	if cfg.gidIdx < 0 && r.portAttr.LinkLayer == verbs.LinkLayerEthernet {
		// RoCE addresses every packet by GID: without one the QP would
		// reach nobody. Take the port's first IPv4 GID (or GID 0).
		idx, err := pickGID(r.ibCtx, cfg.ibPort, r.portAttr.GIDTblLen)
		if err != nil {
			return err
		}
		cfg.gidIdx, picked = idx, true
	}
	if cfg.gidIdx >= 0 {
		var err error
		if myGID, err = r.ibCtx.QueryGID(cfg.ibPort, cfg.gidIdx); err != nil { // ibv_query_gid
			return fmt.Errorf("could not get gid for port %d, index %d: %w", cfg.ibPort, cfg.gidIdx, err)
		}
	}
	if picked {
		fmt.Printf("no GID index given: using GID index %d (%s) of this RoCE port\n", cfg.gidIdx, myGID.Addr())
	}
	local := rcexample.ConData{Addr: r.mr.Addr(), RKey: r.mr.RKey(), QPNum: r.qp.Num(), LID: r.portAttr.LID, GID: myGID}
	fmt.Printf("\nLocal LID = 0x%x\n", r.portAttr.LID)
	b, err := rcexample.SyncData(r.sock, local.Marshal())
	if err != nil {
		return fmt.Errorf("failed to exchange connection data between sides: %w", err)
	}
	if r.remoteProps, err = rcexample.ParseConData(b); err != nil {
		return err
	}
	rp := &r.remoteProps
	fmt.Printf("Remote address = 0x%x\n", rp.Addr)
	fmt.Printf("Remote rkey = 0x%x\n", rp.RKey)
	fmt.Printf("Remote QP number = 0x%x\n", rp.QPNum)
	fmt.Printf("Remote LID = 0x%x\n", rp.LID)
	if cfg.gidIdx >= 0 {
		g := rp.GID
		fmt.Printf("Remote GID =%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x\n",
			g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15])
	}
	if err := modifyQPToInit(r.qp); err != nil {
		return fmt.Errorf("change QP state to INIT failed: %w", err)
	}
	if cfg.serverName != "" { // the client receives the server's SEND
		if err := r.postReceive(); err != nil {
			return fmt.Errorf("failed to post RR: %w", err)
		}
	}
	if err := modifyQPToRTR(r.qp, rp.QPNum, rp.LID, rp.GID); err != nil {
		return fmt.Errorf("failed to modify QP state to RTR: %w", err)
	}
	if err := modifyQPToRTS(r.qp); err != nil {
		return fmt.Errorf("failed to modify QP state to RTS: %w", err)
	}
	fmt.Println("QP state was change to RTS")
	// Neither side may send before the other's QP is ready to receive.
	if err := r.syncByte('Q'); err != nil {
		return fmt.Errorf("sync error after QPs were moved to RTS: %w", err)
	}
	return nil
}

// pickGID returns the index of the port's first IPv4 GID, or 0.
func pickGID(ctx *verbs.Context, port uint8, n int) (int, error) {
	for i := range n {
		g, err := ctx.QueryGID(port, i)
		if err != nil {
			return 0, fmt.Errorf("could not get gid for port %d, index %d: %w", port, i, err)
		}
		if g.Addr().Is4In6() {
			return i, nil
		}
	}
	return 0, nil
}

// modifyQPToInit moves the QP from RESET to INIT (modify_qp_to_init).
func modifyQPToInit(qp *verbs.QP) error {
	attr := verbs.QPAttr{
		QPState:       verbs.QPSInit,
		PortNum:       cfg.ibPort,
		PKeyIndex:     0,
		QPAccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite,
	}
	return qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
}

// modifyQPToRTR moves the QP to RTR, aimed at the remote QP
// (modify_qp_to_rtr).
func modifyQPToRTR(qp *verbs.QP, remoteQPN uint32, dlid uint16, dgid [16]byte) error {
	attr := verbs.QPAttr{
		QPState:         verbs.QPSRTR,
		PathMTU:         verbs.MTU256,
		DestQPNum:       remoteQPN,
		RQPSN:           0,
		MaxDestRdAtomic: 1,
		MinRNRTimer:     0x12,
		AHAttr:          verbs.AHAttr{DLID: dlid, SL: 0, SrcPathBits: 0, PortNum: cfg.ibPort},
	}
	if cfg.gidIdx >= 0 {
		attr.AHAttr.IsGlobal = true
		attr.AHAttr.GRH = verbs.GlobalRoute{DGID: dgid, FlowLabel: 0, HopLimit: 1, SGIDIndex: uint8(cfg.gidIdx), TrafficClass: 0}
	}
	return qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
}

// modifyQPToRTS moves the QP to RTS (modify_qp_to_rts).
func modifyQPToRTS(qp *verbs.QP) error {
	attr := verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: 0x12, RetryCnt: 6, RNRRetry: 0, SQPSN: 0, MaxRdAtomic: 1}
	return qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
}

// postSend posts one work request of opcode on the whole buffer; RDMA
// operations name the peer's buffer (post_send).
func (r *resources) postSend(opcode verbs.WROpcode) error {
	sr := verbs.SendWR{WRID: 0, Opcode: opcode, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{r.mr.SGE(0, msgSize)}}
	if opcode != verbs.WRSend {
		sr.RemoteAddr, sr.RKey = r.remoteProps.Addr, r.remoteProps.RKey
	}
	if err := r.qp.PostSend([]verbs.SendWR{sr}); err != nil { // ibv_post_send
		return fmt.Errorf("failed to post SR: %w", err)
	}
	switch opcode {
	case verbs.WRSend:
		fmt.Println("Send Request was posted")
	case verbs.WRRDMARead:
		fmt.Println("RDMA Read Request was posted")
	case verbs.WRRDMAWrite:
		fmt.Println("RDMA Write Request was posted")
	}
	return nil
}

// postReceive posts a receive on the whole buffer (post_receive).
func (r *resources) postReceive() error {
	rr := verbs.RecvWR{WRID: 0, SGList: []verbs.SGE{r.mr.SGE(0, msgSize)}}
	if err := r.qp.PostRecv([]verbs.RecvWR{rr}); err != nil { // ibv_post_recv
		return err
	}
	fmt.Println("Receive Request was posted")
	return nil
}

// pollCompletion polls the CQ until a completion comes, for at most
// MAX_POLL_CQ_TIMEOUT, and checks it (poll_completion).
func (r *resources) pollCompletion() error {
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(maxPollCQTimeout)
	for {
		n, err := r.cq.Poll(wc) // ibv_poll_cq
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("completion wasn't found in the CQ after timeout")
		}
		// A C program spins here; the software device runs in this
		// process and needs the CPU, so give it a moment.
		time.Sleep(50 * time.Microsecond)
	}
	fmt.Printf("completion was found in CQ with status 0x%x\n", uint32(wc[0].Status))
	if wc[0].Status != verbs.WCSuccess {
		return fmt.Errorf("got bad completion with status: 0x%x (%s), vendor syndrome: 0x%x",
			uint32(wc[0].Status), wc[0].Status, wc[0].VendorErr)
	}
	return nil
}

// operations is the test after the QPs are connected: the server's SEND,
// the client's RDMA READ and RDMA WRITE, with syncs between.
func (r *resources) operations() error {
	client := cfg.serverName != ""
	if !client {
		if err := r.postSend(verbs.WRSend); err != nil {
			return err
		}
	}
	// The server waits for its SEND to complete, the client for the
	// SEND to arrive.
	if err := r.pollCompletion(); err != nil {
		return fmt.Errorf("poll completion failed: %w", err)
	}
	if client {
		fmt.Printf("Message is: '%s'\n", cstr(r.buf))
	} else {
		// Set up the buffer the client will RDMA READ.
		clear(r.buf)
		copy(r.buf, rdmaMsgR)
	}
	if err := r.syncByte('R'); err != nil {
		return fmt.Errorf("sync error before RDMA ops: %w", err)
	}
	if client {
		if err := r.postSend(verbs.WRRDMARead); err != nil {
			return err
		}
		if err := r.pollCompletion(); err != nil {
			return fmt.Errorf("poll completion failed: %w", err)
		}
		fmt.Printf("Contents of server's buffer: '%s'\n", cstr(r.buf))
		clear(r.buf)
		copy(r.buf, rdmaMsgW)
		fmt.Printf("Now replacing it with: '%s'\n", cstr(r.buf))
		if err := r.postSend(verbs.WRRDMAWrite); err != nil {
			return err
		}
		if err := r.pollCompletion(); err != nil {
			return fmt.Errorf("poll completion failed: %w", err)
		}
	}
	// The server learns here that the client's RDMA WRITE is done.
	if err := r.syncByte('W'); err != nil {
		return fmt.Errorf("sync error after RDMA ops: %w", err)
	}
	if !client {
		fmt.Printf("Contents of server buffer: '%s'\n", cstr(r.buf))
	}
	return nil
}

// cstr returns the bytes of b before its first NUL, as printf's %s does.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
