//go:build unix

package rxe

import (
	"fmt"
	"syscall"

	"github.com/rdmago/rdmago/verbs"
)

// fileIdentity returns the device and inode of the file fd refers to:
// XRC domains opened through the same file are one domain.
func fileIdentity(fd int) (fileKey, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fileKey{}, verbs.Errorf("ibv_open_xrcd", verbs.ErrClosed, fmt.Sprintf("fd %d: %v", fd, err))
	}
	return fileKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}
