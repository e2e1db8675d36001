//go:build !linux

package rxe

import "github.com/rdmago/rdmago/rxe/link"

// ownerHeld reports whether a process holds owner number owner on the
// address of sh: off Linux an address is not shared, so only this one.
func ownerHeld(sh *link.Shared, owner uint8) bool { return owner == sh.Owner() }
