// Package getopt parses command lines the way C programs built on glibc's
// getopt and getopt_long do, so that rdmago's ports of rdma-core's tools
// take the same command lines as the originals: grouped flags (-vV), an
// argument attached (-S64, -g0) or in the next word (-S 64), long options
// with "=" or a separate argument (--size=4096, --size 4096), operands
// anywhere among the options (GNU's permutation), and "--" ending the
// options.
package getopt

import (
	"fmt"
	"strings"
)

// Long describes a long option (struct option): its name, whether it takes
// an argument, and the short option it stands for (0 if none, in which case
// Option.Long names it).
type Long struct {
	Name   string
	HasArg bool
	Short  byte
}

// Option is one option found on the command line.
type Option struct {
	// Name is the short option letter, or the Short of the long option
	// given; 0 for a long option without one.
	Name byte
	// Long is the long option's name when one was given ("size").
	Long string
	// Arg is the option's argument, if it takes one.
	Arg string
}

// String returns the option as a user would write it ("-S", "--size").
func (o Option) String() string {
	if o.Long != "" {
		return "--" + o.Long
	}
	return "-" + string(o.Name)
}

// Error is a command line getopt refuses. Its text is what glibc's getopt
// prints after the program name: "invalid option -- 'x'", "option requires
// an argument -- 's'", "unrecognized option '--foo'".
type Error struct {
	Msg string
}

func (e *Error) Error() string { return e.Msg }

// Parse parses args (without the program name) against optstring, in
// getopt's syntax (a letter followed by ':' takes an argument), and longs.
// It returns the options in order and the operands. A long option may be
// abbreviated to any unambiguous prefix, as getopt_long allows.
func Parse(args []string, optstring string, longs []Long) (opts []Option, operands []string, err error) {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			return opts, append(operands, args[i+1:]...), nil
		case strings.HasPrefix(arg, "--"):
			o, used, err := parseLong(arg[2:], args[i+1:], longs)
			if err != nil {
				return opts, operands, err
			}
			i += used
			opts = append(opts, o)
		case len(arg) > 1 && arg[0] == '-':
			for j := 1; j < len(arg); j++ {
				c := arg[j]
				known, hasArg := shortKind(optstring, c)
				if !known {
					return opts, operands, &Error{fmt.Sprintf("invalid option -- '%c'", c)}
				}
				if !hasArg {
					opts = append(opts, Option{Name: c})
					continue
				}
				switch {
				case j+1 < len(arg):
					opts = append(opts, Option{Name: c, Arg: arg[j+1:]})
				case i+1 < len(args):
					i++
					opts = append(opts, Option{Name: c, Arg: args[i]})
				default:
					return opts, operands, &Error{fmt.Sprintf("option requires an argument -- '%c'", c)}
				}
				break
			}
		default:
			operands = append(operands, arg)
		}
	}
	return opts, operands, nil
}

// shortKind reports whether c is an option of optstring and whether it
// takes an argument.
func shortKind(optstring string, c byte) (known, hasArg bool) {
	if c == ':' || c == '-' {
		return false, false
	}
	i := strings.IndexByte(optstring, c)
	if i < 0 {
		return false, false
	}
	return true, i+1 < len(optstring) && optstring[i+1] == ':'
}

// parseLong parses one long option, s being the word after "--", and rest
// the words after it; it returns how many of rest it used.
func parseLong(s string, rest []string, longs []Long) (Option, int, error) {
	name, val, hasVal := strings.Cut(s, "=")
	var match *Long
	ambiguous := false
	for i := range longs {
		l := &longs[i]
		if l.Name == name {
			match, ambiguous = l, false
			break
		}
		if strings.HasPrefix(l.Name, name) && name != "" {
			switch {
			case match == nil:
				match = l
			case match.Short == 0 || match.Short != l.Short:
				ambiguous = true // two options, unless two names of one
			}
		}
	}
	if ambiguous {
		return Option{}, 0, &Error{fmt.Sprintf("option '--%s' is ambiguous", name)}
	}
	if match == nil {
		return Option{}, 0, &Error{fmt.Sprintf("unrecognized option '--%s'", name)}
	}
	o := Option{Name: match.Short, Long: match.Name}
	switch {
	case !match.HasArg && hasVal:
		return o, 0, &Error{fmt.Sprintf("option '--%s' doesn't allow an argument", match.Name)}
	case !match.HasArg:
		return o, 0, nil
	case hasVal:
		o.Arg = val
		return o, 0, nil
	case len(rest) > 0:
		o.Arg = rest[0]
		return o, 1, nil
	}
	return o, 0, &Error{fmt.Sprintf("option '--%s' requires an argument", match.Name)}
}
