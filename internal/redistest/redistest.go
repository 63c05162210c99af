// Package redistest starts throw-away redis-server processes for tests: on a
// free loopback port, with no persistence (--save "" --appendonly no), in a
// temporary directory, killed when the test ends (and, on Linux, when the
// test process dies). [Start] gives a single node, [StartCluster] a one-node
// Redis Cluster, [StartMasters] a Redis Cluster of several masters (each
// node a [Server]), [StartWithReplicas] one whose masters have a replica
// each, [StartSentinel] a Sentinel monitoring a node; a [Server]
// can be stopped (a crash), restarted empty on the same address, paused and
// resumed, to test fail modes.
//
//	srv := redistest.Start(t)
//	opt, _ := redis.ParseURL(srv.URL()) // or redis.Options{Addr: srv.Addr}
//
// When redis-server is not on PATH the test is skipped with a message, unless
// the environment has CI=true, in which case it fails: CI must run the Redis
// tests (.ci/run installs redis-server).
//
// Addr, URL, Do and Logs may be used from any goroutine; Stop, Restart,
// Pause and Resume must not run concurrently with each other.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/servertest"
)

// startTimeout bounds how long Start waits for a new server to answer PING.
const startTimeout = 10 * time.Second

// Server is a redis-server process started by [Start] or [StartCluster].
type Server struct {
	// Addr is the server's "127.0.0.1:port" address. It stays the same
	// across [Server.Restart].
	Addr string

	bin      string
	dir      string
	cluster  bool
	sentinel string   // "name host:port": a Sentinel monitoring that master
	extra    []string // arguments given to Start, reused by Restart

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	logs *servertest.Buffer
}

// Start starts a redis-server on a free 127.0.0.1 port, waits until it
// answers, and registers t.Cleanup to kill it. It skips t when redis-server
// is missing (fails it when CI=true). Extra arguments are passed to
// redis-server as "--name value" pairs, e.g. "--maxmemory", "10mb".
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, false, args)
}

// StartCluster starts a one-node Redis Cluster (cluster-enabled, every hash
// slot assigned to the node) on a free 127.0.0.1 port and waits until the
// cluster state is ok. Like a real cluster, it refuses commands whose keys
// span several hash slots (CROSSSLOT). Skips and cleans up like [Start].
func StartCluster(t testing.TB, args ...string) *Server {
	t.Helper()
	s := start(t, true, args)
	if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := s.Do("CLUSTER", "INFO")
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ok after %v: %q, %v", startTimeout, info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StartSentinel starts a Redis Sentinel on a free 127.0.0.1 port that
// monitors master under masterName (quorum 1), for go-redis's
// NewFailoverClient with SentinelAddrs: []string{sentinel.Addr}. Skips and
// cleans up like [Start].
func StartSentinel(t testing.TB, masterName string, master *Server) *Server {
	t.Helper()
	return startServer(t, false, masterName+" "+master.Addr, nil)
}

func start(t testing.TB, cluster bool, args []string) *Server {
	t.Helper()
	return startServer(t, cluster, "", args)
}

func startServer(t testing.TB, cluster bool, sentinel string, args []string) *Server {
	t.Helper()
	bin := servertest.Require(t, "redis-server", "redis-server")
	s := &Server{bin: bin, dir: t.TempDir(), cluster: cluster, sentinel: sentinel, extra: args}
	var lastErr error
	for range 5 { // the free port may be taken between probe and bind
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(servertest.FreePort(t)))
		if lastErr = s.launch(); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: could not start redis-server: %v", lastErr)
	return nil
}

// launch starts the process on s.Addr and waits for PING.
func (s *Server) launch() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{
		"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", "",
		"--protected-mode", "no", "--daemonize", "no",
	}
	if s.cluster {
		args = append(args, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes-"+port+".conf"))
	}
	if s.sentinel != "" {
		// Sentinel rewrites its configuration file: it must be a file.
		name, master, _ := strings.Cut(s.sentinel, " ")
		host, mport, _ := net.SplitHostPort(master)
		conf := filepath.Join(s.dir, "sentinel-"+port+".conf")
		text := fmt.Sprintf("port %s\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n",
			port, s.dir, name, host, mport, name)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return err
		}
		args = []string{conf, "--sentinel"}
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	logs := &servertest.Buffer{}
	cmd.Stdout = logs
	cmd.Stderr = logs
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(startTimeout)
	for {
		if _, err := s.Do("PING"); err == nil {
			break
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited at start (%v): %s", waitErr, logs.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server did not answer PING within %v: %s", startTimeout, logs.String())
		}
	}
	s.mu.Lock()
	s.cmd, s.done, s.logs = cmd, done, logs
	s.mu.Unlock()
	return nil
}

// URL returns "redis://127.0.0.1:port/0", for redis.ParseURL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Stop kills the server (SIGKILL: a crash, not a shutdown; a paused server
// too) and waits until the process has exited, so its port refuses
// connections. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// running reports whether s has been started and not stopped since.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Restart starts a fresh server (empty: nothing was persisted) on the same
// address after [Server.Stop]. It fails t if the port cannot be bound again.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for range 50 {
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redistest: restart on %s: %v", s.Addr, err)
}

// Pause stops the server process with SIGSTOP: connections stay open and
// commands hang, as with a stalled server or a network partition.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a server paused by [Server.Pause].
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Logs returns what the server has written to its log so far.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

// Do sends one command on a fresh connection and returns its reply in a
// simple text form: a status or bulk string as is, an integer in decimal,
// an array as its elements joined by newlines, nil as "". A Redis error
// reply is returned as an error. It is meant for test set-up and checks
// (FLUSHALL, PTTL, CLUSTER INFO), not for load.
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		parts := make([]string, n)
		for i := range parts {
			if parts[i], err = readReply(r); err != nil {
				return "", err
			}
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: unexpected reply %q", line)
}
