package layers

import (
	"errors"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/rdmago/rdmago"

// rule names, for the package in dir (and, unless only is set, those below
// it), the imports it must not have. A forbidden import ending in "/"
// forbids a whole tree.
type rule struct {
	dir    string
	only   bool // dir itself, not the packages below it
	forbid []string
}

var rules = []rule{
	// Packet formats: no state, no I/O, no other rdmago package.
	{dir: "rxe/wire", forbid: []string{module + "/", "net", "os", "syscall", "golang.org/x/sys/", "sync"}},
	// The verbs API knows nothing of UDP or of any provider.
	{dir: "verbs", forbid: []string{module + "/rxe", module + "/rdmacore", module + "/rdmacm", module + "/fabric", "net", "syscall", "golang.org/x/sys/"}},
	// The connection manager works over any provider; providers plug in
	// through the verbs driver contract and rdmacm.Backend.
	{dir: "rdmacm", forbid: []string{module + "/rxe", module + "/rdmacore", module + "/fabric"}},
	// rsockets run over any provider, through verbs and rdmacm.
	{dir: "rsocket", forbid: []string{module + "/rxe", module + "/rdmacore", module + "/fabric"}},
	// The rdma-core provider stands beside the software device, not on it.
	{dir: "rdmacore", forbid: []string{module + "/rxe", module + "/fabric"}},
	// The software device is a verbs provider; the CM and fabric sit above it.
	{dir: "rxe", forbid: []string{module + "/rdmacore", module + "/rdmacm", module + "/fabric", module + "/rsocket"}},
	// Links carry packets; they know the wire format and nothing above it.
	{dir: "rxe/link", forbid: []string{module + "/verbs", module + "/rdmacm", module + "/fabric"}},
	// CM MAD formats: like rxe/wire, no state, no I/O, no QPs.
	{dir: "rdmacm/mad", forbid: []string{module + "/", "net", "os", "syscall", "golang.org/x/sys/", "sync"}},
	// fabric is the API over registered providers: it knows none of them,
	// nor what they are built on.
	{dir: "fabric", only: true, forbid: []string{module + "/fabric/tcp", module + "/fabric/vrb", module + "/fabric/sockets", module + "/fabric/udp",
		module + "/verbs", module + "/rdmacm", module + "/rxe", module + "/rdmacore"}},
	// The tcp provider speaks libfabric's tcp protocol over sockets: no verbs.
	{dir: "fabric/tcp", forbid: []string{module + "/verbs", module + "/rdmacm", module + "/rxe", module + "/rdmacore", module + "/fabric/vrb"}},
	// The sockets and udp providers speak their protocols over sockets:
	// no verbs, and no other provider.
	{dir: "fabric/sockets", forbid: []string{module + "/verbs", module + "/rdmacm", module + "/rxe", module + "/rdmacore", module + "/fabric/tcp", module + "/fabric/vrb", module + "/fabric/udp"}},
	{dir: "fabric/udp", forbid: []string{module + "/verbs", module + "/rdmacm", module + "/rxe", module + "/rdmacore", module + "/fabric/tcp", module + "/fabric/vrb", module + "/fabric/sockets"}},
	// NVMe over Fabrics' formats: like rxe/wire, no state, no I/O.
	{dir: "nvmeof/wire", forbid: []string{module + "/", "net", "os", "syscall", "golang.org/x/sys/", "sync"}},
	// The NVMe/RDMA host and target run over any device, through verbs
	// and rdmacm.
	{dir: "nvmeof", only: true, forbid: []string{module + "/rxe", module + "/rdmacore", module + "/fabric", module + "/rsocket"}},
	// The verbs provider goes through verbs and rdmacm, whichever device
	// is under them.
	{dir: "fabric/vrb", forbid: []string{module + "/rxe", module + "/rdmacore", module + "/fabric/tcp"}},
	// ofi_rxm's engine and what the providers share run over any provider.
	{dir: "fabric/internal", forbid: []string{module + "/fabric/tcp", module + "/fabric/vrb", module + "/verbs", module + "/rdmacm", module + "/rxe", module + "/rdmacore"}},
	// The capture reader is a leaf.
	{dir: "internal/pcap", forbid: []string{module + "/"}},
}

// The library's packages take from internal/ only leaves: small helpers
// that import no other rdmago package. Tool engines (internal/perftest,
// internal/rping ...) are above the library, not under it.
var (
	library = []string{"verbs", "rxe", "rdmacm", "rdmacore", "fabric", "rsocket", "nvmeof"}
	leaves  = []string{"internal/racesync", "internal/yield", "internal/units", "internal/fifo"}
)

// violations returns what is wrong with the non-test imports of the
// package in dir (a path relative to the module's root).
func violations(dir string, imports []string) []string {
	var bad []string
	for _, r := range rules {
		if !within(dir, r.dir, r.only) {
			continue
		}
		for _, imp := range imports {
			for _, f := range r.forbid {
				if imp == f || strings.HasSuffix(f, "/") && strings.HasPrefix(imp, f) {
					bad = append(bad, dir+" imports "+imp+", which its layer forbids")
				}
			}
		}
	}
	for _, lib := range library {
		if !within(dir, lib, false) {
			continue
		}
		for _, imp := range imports {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok && strings.HasPrefix(rel, "internal/") && !slices.Contains(leaves, rel) {
				bad = append(bad, dir+" imports "+imp+", which is not a leaf of internal/ ("+strings.Join(leaves, ", ")+")")
			}
		}
	}
	return bad
}

// within reports whether dir is base or, unless only, below it.
func within(dir, base string, only bool) bool {
	return dir == base || !only && strings.HasPrefix(dir, base+"/")
}

func TestViolationsNameEachWrongImport(t *testing.T) {
	for _, c := range []struct {
		dir     string
		imports []string
		want    int
	}{
		{"verbs", []string{"context", module + "/internal/racesync"}, 0},
		{"verbs", []string{module + "/rxe"}, 1},
		{"verbs/swcq", []string{"net"}, 1},
		{"rxe/wire", []string{"encoding/binary"}, 0},
		{"rxe/wire", []string{"sync", module + "/verbs"}, 2},
		{"fabric", []string{module + "/fabric/tcp"}, 1},
		{"fabric/tcp", []string{module + "/fabric", module + "/fabric/internal/rxm"}, 0},
		{"fabric/tcp", []string{module + "/verbs"}, 1},
		{"fabric/vrb", []string{module + "/verbs", module + "/rdmacm", module + "/rxe"}, 1},
		{"rsocket", []string{module + "/internal/perftest"}, 1},
		{"rxe", []string{module + "/internal/yield", module + "/internal/units"}, 0},
		{"rdmacore", []string{module + "/rxe", module + "/internal/vmtest"}, 2},
		{"internal/perftest", []string{module + "/rxe", module + "/internal/units"}, 0},
		{"rxewire", []string{"net"}, 0}, // a name that merely starts like a rule's
	} {
		if got := violations(c.dir, c.imports); len(got) != c.want {
			t.Errorf("violations(%s, %v) = %q, want %d", c.dir, c.imports, got, c.want)
		}
	}
}

// contexts are the builds whose imports count: the default one, and the
// one with cgo and the rdmacore tag, so that the rdma-core provider's
// files are read too.
func contexts() []*build.Context {
	plain := build.Default
	tagged := build.Default
	tagged.CgoEnabled = true
	tagged.BuildTags = append(slices.Clone(tagged.BuildTags), "rdmacore")
	return []*build.Context{&plain, &tagged}
}

// eachPackage calls f with every package directory of the module below
// root (relative path) and its imports in any of contexts, non-test and
// test ones apart.
func eachPackage(t *testing.T, root string, f func(dir string, imports, testImports []string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || d.Name() == "grpcrdma" || d.Name() == "interop") {
			return filepath.SkipDir // modules of their own, and data
		}
		rel, _ := filepath.Rel(root, path)
		var imports, testImports []string
		found := false
		for _, ctx := range contexts() {
			pkg, err := ctx.ImportDir(path, 0)
			if _, none := err.(*build.NoGoError); none {
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", rel, err)
				continue
			}
			found = true
			imports = append(imports, pkg.Imports...)
			testImports = append(testImports, pkg.TestImports...)
			testImports = append(testImports, pkg.XTestImports...)
		}
		if found {
			slices.Sort(imports)
			slices.Sort(testImports)
			f(filepath.ToSlash(rel), slices.Compact(imports), slices.Compact(testImports))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPackagesKeepTheirLayer(t *testing.T) {
	seen := 0
	eachPackage(t, "../..", func(dir string, imports, _ []string) {
		seen++
		for _, v := range violations(dir, imports) {
			t.Error(v)
		}
	})
	if seen < 20 {
		t.Fatalf("read %d packages; the walk missed the tree", seen)
	}
}

func TestRulesNameDirectoriesThatExist(t *testing.T) {
	for _, r := range rules {
		if _, err := os.Stat(filepath.Join("../..", r.dir)); errors.Is(err, os.ErrNotExist) {
			t.Errorf("rule for %s: no such directory", r.dir)
		}
	}
	for _, l := range append(slices.Clone(library), leaves...) {
		if _, err := os.Stat(filepath.Join("../..", l)); errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: no such directory", l)
		}
	}
}

func TestLeavesImportNoOtherPackageOfTheModule(t *testing.T) {
	eachPackage(t, "../..", func(dir string, imports, _ []string) {
		if !slices.Contains(leaves, dir) {
			return
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, module+"/") {
				t.Errorf("%s is listed as a leaf but imports %s", dir, imp)
			}
		}
	})
}

func TestNothingImportsCmd(t *testing.T) {
	eachPackage(t, "../..", func(dir string, imports, testImports []string) {
		for _, imp := range append(imports, testImports...) {
			if strings.HasPrefix(imp, module+"/cmd") {
				t.Errorf("%s imports %s", dir, imp)
			}
		}
	})
}

func TestRdmacoreFilesBehindTheTagAreRead(t *testing.T) {
	pkg, err := contexts()[1].ImportDir("../../rdmacore", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.CgoFiles) == 0 {
		t.Fatal("the tagged build reads none of rdmacore's cgo files: their imports go unchecked")
	}
}
