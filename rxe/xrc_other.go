//go:build !unix

package rxe

import "github.com/rdmago/rdmago/verbs"

// fileIdentity would name the file fd refers to; without Unix file
// descriptors, XRC domains cannot be shared through files.
func fileIdentity(fd int) (fileKey, error) {
	return fileKey{}, verbs.Errorf("ibv_open_xrcd", verbs.ErrNotSupported, "XRC domains shared through a file need Unix file descriptors; use fd -1")
}
