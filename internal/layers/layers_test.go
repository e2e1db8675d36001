package layers

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/rdmago/rdmago"

// rules lists, per package directory (and those below it), the imports it
// must not have. A rule ending in "/" forbids a whole tree.
var rules = []struct {
	dir    string
	forbid []string
}{
	// Packet formats: no state, no I/O, no other rdmago package.
	{"rxe/wire", []string{module + "/", "net", "os", "syscall", "golang.org/x/sys/", "sync"}},
	// The verbs API knows nothing of UDP or of any provider.
	{"verbs", []string{module + "/rxe", module + "/rdmacore", module + "/rdmacm", "net", "syscall", "golang.org/x/sys/"}},
	// The connection manager works over any provider; providers plug in
	// through the verbs driver contract and rdmacm.Backend.
	{"rdmacm", []string{module + "/rxe", module + "/rdmacore"}},
	// rsockets run over any provider, through verbs and rdmacm.
	{"rsocket", []string{module + "/rxe", module + "/rdmacore", module + "/fabric"}},
	// The rdma-core provider stands beside the software device, not on it.
	{"rdmacore", []string{module + "/rxe"}},
	// Links carry packets; they know the wire format and nothing above it.
	{"rxe/link", []string{module + "/verbs", module + "/rdmacm", module + "/fabric"}},
	// CM MAD formats: like rxe/wire, no state, no I/O, no QPs.
	{"rdmacm/mad", []string{module + "/", "net", "os", "syscall", "golang.org/x/sys/", "sync"}},
	// The capture reader is a leaf.
	{"internal/pcap", []string{module + "/"}},
}

func TestPackagesKeepTheirLayer(t *testing.T) {
	root := "../.."
	for _, r := range rules {
		dir := filepath.Join(root, r.dir)
		if _, err := os.Stat(dir); err != nil {
			continue // not written yet
		}
		filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() || d.Name() == "testdata" {
				return nil
			}
			pkg, err := build.ImportDir(path, 0)
			if err != nil {
				return nil // no Go files here
			}
			for _, imp := range pkg.Imports {
				for _, f := range r.forbid {
					if imp == f || strings.HasSuffix(f, "/") && strings.HasPrefix(imp, f) {
						rel, _ := filepath.Rel(root, path)
						t.Errorf("%s imports %s, which its layer forbids", rel, imp)
					}
				}
			}
			return nil
		})
	}
}

func TestNothingImportsCmd(t *testing.T) {
	root := "../.."
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil
		}
		for _, imp := range append(pkg.Imports, pkg.TestImports...) {
			if strings.HasPrefix(imp, module+"/cmd") {
				t.Errorf("%s imports %s", path, imp)
			}
		}
		return nil
	})
}
