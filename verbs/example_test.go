package verbs_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// CheckModify tells which attributes a transition needs, as ibv_modify_qp's
// EINVAL would, with their libibverbs names.
func ExampleCheckModify() {
	attr := &verbs.QPAttr{QPState: verbs.QPSRTR}
	_, err := verbs.CheckModify(verbs.QPTRC, verbs.QPSInit, attr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU)
	fmt.Println(err)
	fmt.Println(errors.Is(err, verbs.ErrInvalidArgument))
	// Output:
	// ibv_modify_qp: invalid argument: INIT->RTR of a RC QP needs IBV_QP_RQ_PSN|IBV_QP_MIN_RNR_TIMER|IBV_QP_MAX_DEST_RD_ATOMIC|IBV_QP_DEST_QPN
	// true
}

// Open a software RoCE device and query it, as ibv_devinfo does.
func ExampleDevice_Open() {
	network := link.NewNetwork(1)
	l, err := network.Attach(netip.MustParseAddr("192.0.2.7"))
	if err != nil {
		panic(err)
	}
	dev, err := rxe.NewDevice(rxe.Config{Name: "rxe_example", Links: []link.Link{l}, NetdevMTU: 1500})
	if err != nil {
		panic(err)
	}
	ctx, err := dev.Open() // ibv_open_device
	if err != nil {
		panic(err)
	}
	defer ctx.Close()
	port, _ := ctx.QueryPort(1)  // ibv_query_port
	gid, _ := ctx.QueryGID(1, 0) // ibv_query_gid
	attr, _ := ctx.QueryDevice() // ibv_query_device
	fmt.Println(dev.Name(), port.State, "active MTU", port.ActiveMTU, port.LinkLayer)
	fmt.Println("GID[0]", gid.Addr(), "max_qp_wr", attr.MaxQPWR)
	// Output:
	// rxe_example PORT_ACTIVE active MTU 1024 Ethernet
	// GID[0] 192.0.2.7 max_qp_wr 16384
}
