package getopt

import (
	"reflect"
	"strings"
	"testing"
)

var longs = []Long{{"size", true, 's'}, {"events", false, 'e'}, {"gid-idx", true, 'g'}, {"report_gbits", false, 0}}

func TestParseTakesTheFormsGlibcTakes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		opts     []Option
		operands []string
	}{
		{"separate argument", []string{"-s", "64"}, []Option{{Name: 's', Arg: "64"}}, nil},
		{"attached argument", []string{"-g0"}, []Option{{Name: 'g', Arg: "0"}}, nil},
		{"grouped flags", []string{"-ec"}, []Option{{Name: 'e'}, {Name: 'c'}}, nil},
		{"group ending in an argument", []string{"-es", "4096"}, []Option{{Name: 'e'}, {Name: 's', Arg: "4096"}}, nil},
		{"group with the argument attached", []string{"-eg2"}, []Option{{Name: 'e'}, {Name: 'g', Arg: "2"}}, nil},
		{"long with =", []string{"--size=4096"}, []Option{{Name: 's', Long: "size", Arg: "4096"}}, nil},
		{"long with a separate argument", []string{"--size", "4096"}, []Option{{Name: 's', Long: "size", Arg: "4096"}}, nil},
		{"long abbreviated", []string{"--ev"}, []Option{{Name: 'e', Long: "events"}}, nil},
		{"long without a short form", []string{"--report_gbits"}, []Option{{Long: "report_gbits"}}, nil},
		{"operands anywhere", []string{"host", "-e", "x"}, []Option{{Name: 'e'}}, []string{"host", "x"}},
		{"-- ends the options", []string{"-e", "--", "-s"}, []Option{{Name: 'e'}}, []string{"-s"}},
		{"a lone dash is an operand", []string{"-"}, nil, []string{"-"}},
		{"an argument may start with a dash", []string{"-s", "-1"}, []Option{{Name: 's', Arg: "-1"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, operands, err := Parse(tc.args, "ceg:s:", longs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(opts, tc.opts) || !reflect.DeepEqual(operands, tc.operands) {
				t.Errorf("Parse(%q) = %+v, %q; want %+v, %q", tc.args, opts, operands, tc.opts, tc.operands)
			}
		})
	}
}

func TestParseRefusesWithGlibcsWords(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-x"}, "invalid option -- 'x'"},
		{[]string{"-ex"}, "invalid option -- 'x'"},
		{[]string{"-s"}, "option requires an argument -- 's'"},
		{[]string{"--bogus"}, "unrecognized option '--bogus'"},
		{[]string{"--events=1"}, "option '--events' doesn't allow an argument"},
		{[]string{"--size"}, "option '--size' requires an argument"},
		{[]string{"---"}, "unrecognized option '---'"},
	} {
		_, _, err := Parse(tc.args, "ceg:s:", longs)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestParseRefusesAmbiguousAbbreviations(t *testing.T) {
	_, _, err := Parse([]string{"--s"}, "", []Long{{"size", true, 's'}, {"sl", true, 'l'}})
	if err == nil || err.Error() != "option '--s' is ambiguous" {
		t.Errorf("error %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("-eg0\x00--size=1\x00host")
	f.Fuzz(func(t *testing.T, s string) {
		var args []string
		start := 0
		for i := 0; i <= len(s); i++ {
			if i == len(s) || s[i] == 0 {
				args = append(args, s[start:i])
				start = i + 1
			}
		}
		opts, operands, err := Parse(args, "ceg:s:", longs)
		if err != nil {
			return
		}
		if len(opts)+len(operands) > 2*len(args)+len(s) {
			t.Fatalf("more results than input")
		}
	})
}

func TestParseSpecsAndUsage(t *testing.T) {
	specs := []Spec{
		{Short: 's', Long: "size", Arg: "SIZE", Usage: "message size", Default: "4096"},
		{Short: 'e', Long: "events", Usage: "sleep on CQ events"},
		{Long: "report_gbits", Usage: "report in Gbit/s"},
	}
	opts, rest, err := ParseSpecs([]string{"-es64", "--report_gbits", "host"}, specs)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) != 3 || opts[0].Key() != "e" || opts[1].Key() != "s" || opts[2].Key() != "report_gbits" || len(rest) != 1 {
		t.Fatalf("opts %+v rest %q", opts, rest)
	}
	if n, err := opts[1].Int(1, 1<<30); err != nil || n != 64 {
		t.Errorf("Int = %d, %v", n, err)
	}
	if _, err := (Option{Name: 's', Arg: "big"}).Int(1, 10); err == nil || err.Error() != `-s "big": want a number from 1 to 10` {
		t.Errorf("Int error %v", err)
	}
	var b strings.Builder
	PrintUsage(&b, specs)
	want := "  -s, --size=SIZE     message size (default 4096)\n  -e, --events        sleep on CQ events\n      --report_gbits  report in Gbit/s\n"
	if b.String() != want {
		t.Errorf("usage\n%s\nwant\n%s", b.String(), want)
	}
}

func TestLongOptionsWithoutShortFormsAreTold(t *testing.T) {
	longs := []Long{{"report_gbits", false, 0}, {"report_both", false, 0}, {"report", false, 0}}
	if _, _, err := Parse([]string{"--report_g"}, "", longs); err != nil {
		t.Errorf("unambiguous prefix: %v", err)
	}
	if _, _, err := Parse([]string{"--report_"}, "", longs); err == nil || err.Error() != "option '--report_' is ambiguous" {
		t.Errorf("ambiguous prefix: %v", err)
	}
	opts, _, err := Parse([]string{"--report"}, "", longs)
	if err != nil || len(opts) != 1 || opts[0].Long != "report" {
		t.Errorf("an exact name listed after its prefixes: %+v, %v", opts, err)
	}
}
