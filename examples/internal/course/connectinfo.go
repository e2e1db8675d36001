package course

import (
	"encoding/binary"
	"fmt"
)

// ConnectInfo is the course's struct our_connect_info (ping-sr-1 on): what
// the client tells the listener, in the private data of its connection
// request, so that the agent uses the client's count and message size
// instead of its own options. On the wire both fields are 64-bit and in
// network byte order (the client's htonll, the listener's ntohll).
type ConnectInfo struct {
	RemoteLimit    uint64 // remote_limit: how many messages
	RemoteDataSize uint64 // remote_data_size: how many bytes each
}

// ConnectInfoLen is sizeof(struct our_connect_info).
const ConnectInfoLen = 16

// Marshal returns the struct as it travels (htonll of each field).
func (ci ConnectInfo) Marshal() []byte {
	b := make([]byte, ConnectInfoLen)
	binary.BigEndian.PutUint64(b[0:], ci.RemoteLimit)
	binary.BigEndian.PutUint64(b[8:], ci.RemoteDataSize)
	return b
}

// ParseConnectInfo reads the struct from the private data of a
// CONNECT_REQUEST (ntohll of each field). The private data the connection
// manager delivers is the whole area of the request, so bytes after the
// struct are ignored; fewer than ConnectInfoLen bytes, no messages, or
// messages of no bytes or more than MaxDataSize are errors, for a server
// must not take its client's word for how much memory to register.
func ParseConnectInfo(b []byte) (ConnectInfo, error) {
	if len(b) < ConnectInfoLen {
		return ConnectInfo{}, fmt.Errorf("connect info: %d bytes of private data, want %d", len(b), ConnectInfoLen)
	}
	ci := ConnectInfo{
		RemoteLimit:    binary.BigEndian.Uint64(b[0:]),
		RemoteDataSize: binary.BigEndian.Uint64(b[8:]),
	}
	if ci.RemoteLimit == 0 {
		return ci, fmt.Errorf("connect info: the client asks for no messages")
	}
	if ci.RemoteDataSize == 0 || ci.RemoteDataSize > MaxDataSize {
		return ci, fmt.Errorf("connect info: the client asks for %d-byte messages; this server takes 1 to %d", ci.RemoteDataSize, MaxDataSize)
	}
	return ci, nil
}
