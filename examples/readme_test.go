//go:build unix

package examples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Every Go block of the README is a whole program that compiles and runs
// against this checkout, so that what a newcomer copies works.
func TestREADMEProgramsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs programs")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("the README has no Go block")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	for i, b := range blocks {
		dir := t.TempDir()
		mod := "module readme\n\ngo 1.24\n\nrequire github.com/rdmago/rdmago v0.0.0\n\nreplace github.com/rdmago/rdmago => " + root + "\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), b[1], 0o644); err != nil {
			t.Fatal(err)
		}
		// The module's go.sum covers the program's dependencies.
		if sum, err := os.ReadFile(filepath.Join(root, "go.sum")); err == nil {
			os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
		}
		cmd := exec.Command(goTool, "run", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		done := make(chan struct{})
		var out []byte
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			<-done
		}
		if err != nil {
			t.Errorf("README Go block %d: %v\n%s", i+1, err, out)
			continue
		}
		if len(strings.TrimSpace(string(out))) == 0 {
			t.Errorf("README Go block %d printed %q", i+1, out)
		}
	}
}
