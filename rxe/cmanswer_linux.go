package rxe

import (
	"strconv"

	"github.com/rdmago/rdmago/rxe/link"
	"golang.org/x/sys/unix"
)

// ownerHeld reports whether a process holds owner number owner on the
// shared address of sh. A process holds it by having bound the abstract
// stream socket "@rdmago/<port>/<address>/fwd/<owner>" (see link.Shared),
// which the kernel frees when the process ends: trying to bind that name
// tells. The socket is never listened on, so nobody can connect to it in
// the instant it exists; a process that happens to claim the number in
// that instant finds it taken and takes the next one, as when another
// process holds it. Any error but the name being free counts as held:
// the packet is then forwarded, as it always was.
func ownerHeld(sh *link.Shared, owner uint8) bool {
	if owner == sh.Owner() {
		return true
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	name := "@rdmago/" + strconv.Itoa(int(sh.Port())) + "/" + sh.LocalAddr().String() + "/fwd/" + strconv.Itoa(int(owner))
	return unix.Bind(fd, &unix.SockaddrUnix{Name: name}) != nil
}
