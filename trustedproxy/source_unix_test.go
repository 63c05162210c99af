//go:build unix

package trustedproxy

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFileSourceRefusesNonRegularFiles: a FIFO would block the open (and so
// New and every later Refresh) until a writer came; /dev/zero would be read
// without end. Both are refused before they are opened, within a bound.
func TestFileSourceRefusesNonRegularFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ranges.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "FileSource: " + fifo + ": not a regular file (a named pipe)"},
		{"/dev/zero", "FileSource: /dev/zero: not a regular file (a device)"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := New(Config{Rules: []Rule{{Sources: []Source{FileSource{Path: tc.path}}}}})
			done <- err
		}()
		select {
		case err := <-done:
			if want := "rules[0].sources[0]: " + tc.want; err == nil || err.Error() != want {
				t.Errorf("%s: %v; want %s", tc.path, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: New still blocked after 10s", tc.path)
		}
	}
}
