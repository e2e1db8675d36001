package getopt

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Spec describes one option of a tool for ParseSpecs and PrintUsage: its
// short letter (0 if none), long name ("" if none), the name of its
// argument ("" if it takes none), what it does, and its default as the
// usage shows it ("" for none).
type Spec struct {
	Short   byte
	Long    string
	Arg     string
	Usage   string
	Default string
}

// ParseSpecs parses args against specs as Parse does.
func ParseSpecs(args []string, specs []Spec) ([]Option, []string, error) {
	var short strings.Builder
	var longs []Long
	for _, s := range specs {
		if s.Short != 0 {
			short.WriteByte(s.Short)
			if s.Arg != "" {
				short.WriteByte(':')
			}
		}
		if s.Long != "" {
			longs = append(longs, Long{Name: s.Long, HasArg: s.Arg != "", Short: s.Short})
		}
	}
	return Parse(args, short.String(), longs)
}

// Key returns the option's name as the specs give it: the short letter
// if it has one, else the long name.
func (o Option) Key() string {
	if o.Name != 0 {
		return string(o.Name)
	}
	return o.Long
}

// Int parses the option's argument as an integer (decimal, or 0x hex as
// strtol with base 0 reads it) from min to max, with an error that names
// the option and the range.
func (o Option) Int(min, max int) (int, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(o.Arg), 0, 64)
	if err != nil || n < int64(min) || n > int64(max) {
		return 0, fmt.Errorf("%s %q: want a number from %d to %d", o, o.Arg, min, max)
	}
	return int(n), nil
}

// PrintUsage prints one line per spec, aligned, in getopt_long's style:
//
//	-s, --size=SIZE        size of message to exchange (default 4096)
func PrintUsage(w io.Writer, specs []Spec) {
	cols := make([]string, len(specs))
	width := 0
	for i, s := range specs {
		var b strings.Builder
		switch {
		case s.Short != 0 && s.Long != "":
			fmt.Fprintf(&b, "-%c, --%s", s.Short, s.Long)
		case s.Short != 0:
			fmt.Fprintf(&b, "-%c", s.Short)
		default:
			fmt.Fprintf(&b, "    --%s", s.Long)
		}
		if s.Arg != "" {
			if s.Long != "" {
				b.WriteString("=" + s.Arg)
			} else {
				b.WriteString(" " + s.Arg)
			}
		}
		cols[i] = b.String()
		width = max(width, len(cols[i]))
	}
	for i, s := range specs {
		line := s.Usage
		if s.Default != "" {
			line += " (default " + s.Default + ")"
		}
		fmt.Fprintf(w, "  %-*s  %s\n", width, cols[i], line)
	}
}
