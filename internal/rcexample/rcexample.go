// Package rcexample holds what the two Go versions of the Mellanox manual's
// RDMA_RC_example share (`rdmago demo` in internal/demo, and the program in
// examples/rdma_rc_example): the connection data the sides exchange over
// TCP (struct cm_con_data_t) and the exchange itself (sock_sync_data).
package rcexample

import (
	"encoding/binary"
	"fmt"
	"io"
)

// ConData is what each side tells the other before it connects its QP
// (struct cm_con_data_t): the address and remote key of its buffer, its QP
// number, its port's LID and its GID.
type ConData struct {
	Addr  uint64   // buffer address
	RKey  uint32   // remote key
	QPNum uint32   // QP number
	LID   uint16   // LID of the IB port
	GID   [16]byte // GID
}

// ConDataLen is sizeof(struct cm_con_data_t): the C struct is packed.
const ConDataLen = 8 + 4 + 4 + 2 + 16

// Marshal returns the struct as it travels: packed, each number in
// network byte order (htonll, htonl, htons), the GID as it is.
func (c *ConData) Marshal() []byte {
	b := make([]byte, ConDataLen)
	binary.BigEndian.PutUint64(b[0:], c.Addr)
	binary.BigEndian.PutUint32(b[8:], c.RKey)
	binary.BigEndian.PutUint32(b[12:], c.QPNum)
	binary.BigEndian.PutUint16(b[16:], c.LID)
	copy(b[18:], c.GID[:])
	return b
}

// ParseConData reads the struct the peer sent (ntohll, ntohl, ntohs). b
// must be exactly ConDataLen bytes.
func ParseConData(b []byte) (ConData, error) {
	if len(b) != ConDataLen {
		return ConData{}, fmt.Errorf("connection data: %d bytes, want %d", len(b), ConDataLen)
	}
	var c ConData
	c.Addr = binary.BigEndian.Uint64(b[0:])
	c.RKey = binary.BigEndian.Uint32(b[8:])
	c.QPNum = binary.BigEndian.Uint32(b[12:])
	c.LID = binary.BigEndian.Uint16(b[16:])
	copy(c.GID[:], b[18:])
	return c, nil
}

// SyncData writes local to the peer and reads as many bytes back
// (sock_sync_data): both sides call it with data of the same size, so it
// both exchanges data and, with a byte each way, keeps the sides in step.
// The write does not wait for the read (the kernel's socket buffer holds
// it), as in C.
func SyncData(conn io.ReadWriter, local []byte) ([]byte, error) {
	if _, err := conn.Write(local); err != nil {
		return nil, fmt.Errorf("sock_sync_data: writing %d bytes: %w", len(local), err)
	}
	remote := make([]byte, len(local))
	if _, err := io.ReadFull(conn, remote); err != nil {
		return nil, fmt.Errorf("sock_sync_data: reading the peer's %d bytes: %w", len(local), err)
	}
	return remote, nil
}
