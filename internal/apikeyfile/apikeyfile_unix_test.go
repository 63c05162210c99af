//go:build unix

package apikeyfile

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ratekey/ratekey/identity"
)

// TestNonRegularFilesRefused: a FIFO would block Load (and so every reload)
// until a writer came, /dev/zero would be read without end; both are
// refused before they are opened, within 10 s. Append refuses them too.
func TestNonRegularFilesRefused(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "keys.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "API key file: " + fifo + ": not a regular file (a named pipe)"},
		{"/dev/zero", "API key file: /dev/zero: not a regular file (a device)"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := Load(tc.path)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || err.Error() != tc.want {
				t.Errorf("Load(%s): %v; want %s", tc.path, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Load(%s) still blocked after 10s", tc.path)
		}
		go func() {
			done <- Append(tc.path, identity.APIKeyRecord{ID: "abcdefABCDEF", Tenant: "t", Account: "a"})
		}()
		select {
		case err := <-done:
			if want := "API key file: " + tc.path + ": not a regular file"; err == nil || err.Error() != want {
				t.Errorf("Append(%s): %v; want %s", tc.path, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Append(%s) still blocked after 10s", tc.path)
		}
	}
}
