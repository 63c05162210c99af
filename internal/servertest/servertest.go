// Package servertest starts throw-away nginx servers for tests, and holds
// the small process helpers such tests share: finding a required binary, a
// free loopback port, a concurrency-safe output buffer, and a graceful stop.
//
//	nginx := servertest.RequireNginx(t)
//	addr := servertest.StartNginx(t, nginx, t.TempDir(), func(port int) string { return conf })
//
// When nginx is not installed the test is skipped with a message, unless the
// environment has CI=true, in which case it fails: CI must run the nginx
// tests (.ci/run installs nginx).
package servertest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Require returns the path of the first of names found on PATH (or as an
// absolute path), the binary of Debian package pkg. Without one it skips
// the test, or fails it when CI=true: CI must run every test (.ci/run
// installs the packages).
func Require(t testing.TB, pkg string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if path, err := exec.LookPath(n); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed; .ci/run must apt-get install %s", pkg, pkg)
	}
	t.Skipf("%s is not installed (apt-get install %s); skipping", pkg, pkg)
	return ""
}

// RequireNginx returns the path of the nginx binary (on PATH, or Debian's
// /usr/sbin/nginx, which a non-root PATH may lack), as [Require] does.
func RequireNginx(t testing.TB) string {
	t.Helper()
	return Require(t, "nginx", "nginx", "/usr/sbin/nginx")
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StartNginx runs nginx in the foreground with every path under dir (prefix
// dir, error log dir/error.log) and the configuration conf returns for a
// free loopback port, waits up to 15 s until the port accepts connections,
// and returns "127.0.0.1:port". The process is stopped when the test ends.
// The configuration must say `daemon off;` and listen on the port.
func StartNginx(t testing.TB, nginx, dir string, conf func(port int) string) string {
	t.Helper()
	port := FreePort(t)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf(port)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"))
	out := &Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Stop(cmd) })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
	t.Fatalf("nginx did not start: %s\n%s", out, errLog)
	return ""
}

// Stop interrupts a process started by a test and waits for it, killing it
// if it has not exited after 10 s.
func Stop(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Buffer collects output written concurrently (a process's stdout and
// stderr, a logger used by several goroutines). Safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
