package pcap

import (
	"fmt"
	"math/bits"
	"time"
)

// iface is a pcapng interface, as described by an Interface Description
// Block.
type iface struct {
	linkType LinkType
	snaplen  uint32
	units    uint64 // timestamp units per second, from if_tsresol
	offset   int64  // seconds added to timestamps, from if_tsoffset
}

// defaultUnits is the timestamp resolution of an interface without an
// if_tsresol option: microseconds.
const defaultUnits = 1e6

// time converts a timestamp in the interface's units to an absolute time.
func (ifc *iface) time(ts uint64) time.Time {
	sec, rem := ts/ifc.units, ts%ifc.units
	ns := rem
	if ifc.units != 1e9 {
		// rem*1e9/units without overflow; the quotient is below 1e9
		// because rem < units, so Div64 cannot panic.
		hi, lo := bits.Mul64(rem, 1e9)
		ns, _ = bits.Div64(hi, lo, ifc.units)
	}
	return time.Unix(int64(sec)+ifc.offset, int64(ns)).UTC()
}

// tsUnits decodes an if_tsresol value into timestamp units per second: if
// the high bit is set the rest is a negative power of 2, otherwise a negative
// power of 10. It reports false for resolutions finer than a uint64 can
// count.
func tsUnits(v byte) (uint64, bool) {
	e := uint(v & 0x7f)
	if v&0x80 != 0 {
		if e > 63 {
			return 0, false
		}
		return 1 << e, true
	}
	if e > 19 {
		return 0, false
	}
	u := uint64(1)
	for range e {
		u *= 10
	}
	return u, true
}

// readIDB reads the body of an Interface Description Block and adds the
// interface to the current section.
func (r *Reader) readIDB(b *block) error {
	var f [8]byte
	if err := b.read(f[:], "interface description"); err != nil {
		return err
	}
	ifc := iface{
		linkType: LinkType(r.order.Uint16(f[0:])),
		snaplen:  r.order.Uint32(f[4:]),
		units:    defaultUnits,
	}
	for b.remain >= 4 {
		var o [4]byte
		if err := b.read(o[:], "option header"); err != nil {
			return err
		}
		code, n := r.order.Uint16(o[0:]), int(r.order.Uint16(o[2:]))
		if code == optEndOfOpt {
			break
		}
		padded := (n + 3) &^ 3
		if padded > b.remain {
			return b.tooShort(fmt.Sprintf("option %d of length %d", code, n))
		}
		switch {
		case code == optTSResol && n == 1:
			var v [4]byte
			if err := b.read(v[:], "if_tsresol"); err != nil {
				return err
			}
			u, ok := tsUnits(v[0])
			if !ok {
				return &Error{Offset: b.start, Msg: fmt.Sprintf("unsupported if_tsresol %#x in interface description block", v[0])}
			}
			ifc.units = u
		case code == optTSOffset && n == 8:
			var v [8]byte
			if err := b.read(v[:], "if_tsoffset"); err != nil {
				return err
			}
			ifc.offset = int64(r.order.Uint64(v[:]))
		default:
			if err := b.skip(padded, "option"); err != nil {
				return err
			}
		}
	}
	if err := b.finish(); err != nil {
		return err
	}
	r.ifaces = append(r.ifaces, ifc)
	return nil
}
