package rdmacm_test

import (
	"fmt"
	"net/netip"

	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rxe"
)

// A sender joins a group as a send-only member and learns from the
// MULTICAST_JOIN event how to address it: a UD send to this address
// vector, QP number and Q_Key reaches every QP attached to the group (a
// receiver joins as a full member after creating its UD QP, and its QP is
// attached by the join).
func ExampleID_JoinMulticastEx() {
	id, err := rdmacm.CreateID(nil, nil, rdmacm.PSUDP) // synchronous: calls wait for their event
	if err != nil {
		fmt.Println(err)
		return
	}
	defer id.Destroy() // also leaves the group
	if err := id.BindAddr(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		fmt.Println(err)
		return
	}
	group := netip.MustParseAddr("239.1.2.3")
	if err := id.JoinMulticastEx(group, rdmacm.JoinSendOnlyFullMember, "my group"); err != nil {
		fmt.Println(err)
		return
	}
	ev := id.LastEvent() // MULTICAST_JOIN
	fmt.Println(ev.Type, ev.UD.Context)
	fmt.Printf("send to DGID %v, QPN %#x, Q_Key %#x\n", ev.UD.AHAttr.GRH.DGID, ev.UD.QPNum, ev.UD.QKey)
	fmt.Println(id.LeaveMulticast(group))
	// Output:
	// RDMA_CM_EVENT_MULTICAST_JOIN my group
	// send to DGID 0000:0000:0000:0000:0000:ffff:ef01:0203, QPN 0xffffff, Q_Key 0x1234567
	// <nil>
}
