package selfserver

import (
	"os"
	"path/filepath"
	"testing"
)

// TestServer is the server process of TestStartRunsTheServerUntilTheTestEnds;
// it skips unless that test started it. It writes the file named by its
// environment once it is told to stop.
func TestServer(t *testing.T) {
	done := os.Getenv("SELFSERVER_TEST_DONE")
	if done == "" {
		t.Skip("runs as the server process of TestStartRunsTheServerUntilTheTestEnds")
	}
	stopped := make(chan struct{})
	Serving(func() { close(stopped) })
	<-stopped
	if err := os.WriteFile(done, []byte("stopped"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStartRunsTheServerUntilTheTestEnds: Start returns once the server
// says it listens, and the server is told to stop, and has stopped, when
// the test that started it ends.
func TestStartRunsTheServerUntilTheTestEnds(t *testing.T) {
	done := filepath.Join(t.TempDir(), "done")
	t.Run("serve", func(t *testing.T) {
		Start(t, "TestServer", []string{"SELFSERVER_TEST_DONE=" + done})
		if _, err := os.Stat(done); err == nil {
			t.Fatal("the server stopped while the test that started it runs")
		}
	})
	if b, err := os.ReadFile(done); err != nil || string(b) != "stopped" {
		t.Fatalf("the server did not stop when its test ended: %q, %v", b, err)
	}
}
