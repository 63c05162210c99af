package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/servertest"
)

// clusterTimeout bounds how long StartCluster3 and WaitOK wait for the
// cluster to agree on its slots.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of several masters started by [StartMasters]
// (no replicas) or [StartWithReplicas] (one replica each). Its Nodes are
// ordinary [Server]s: one can be stopped and restarted (empty, but with its
// cluster configuration file, so it rejoins with its slots, or as a
// replica if one took them over meanwhile), after which [Cluster.WaitOK]
// waits for the cluster.
type Cluster struct {
	Nodes []*Server

	replicaOf map[*Server]*Server // a replica's master at the start (StartWithReplicas)
}

// StartMasters starts n >= 3 redis-server processes with cluster-enabled on
// free 127.0.0.1 ports (each port p with p+10000 free too, for the cluster
// bus), gives each an even range of the 16384 slots and a distinct config
// epoch, joins them with CLUSTER MEET (what `redis-cli --cluster create
// --cluster-replicas 0` does, without its one-second waits), and waits
// until every node reports cluster_state:ok. Extra arguments go to every
// redis-server, as for [Start]. Skips when redis-server is missing (fails
// when CI=true); t.Cleanup stops every node.
func StartMasters(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	servertest.Require(t, "redis-server", "redis-server")
	return startMasters(t, n, args)
}

// env is what starting a cluster needs of a test: a testing.TB, or a
// [Shared] cluster's own.
type env interface {
	Helper()
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

func startMasters(t env, n int, args []string) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, not %d", n)
	}
	c := &Cluster{}
	for range n {
		c.Nodes = append(c.Nodes, startClusterNode(t, args))
	}
	// What redis-cli --cluster create --cluster-replicas 0 does, without
	// its one-second waits.
	join(t, c.Nodes, n)
	c.WaitOK(t)
	return c
}

// join makes nodes one cluster, without waiting for it: the first masters
// nodes get even ranges of the 16384 slots (ADDSLOTSRANGE), every node a
// distinct config epoch, and every node meets every other (no waiting for
// gossip).
func join(t env, nodes []*Server, masters int) {
	t.Helper()
	for i, s := range nodes {
		if i < masters {
			lo, hi := i*16384/masters, (i+1)*16384/masters-1
			if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
				t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr, err)
			}
		}
		if _, err := s.Do("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			t.Fatalf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %v", s.Addr, err)
		}
	}
	for i, s := range nodes {
		for _, o := range nodes[i+1:] {
			host, port, _ := net.SplitHostPort(o.Addr)
			if _, err := s.Do("CLUSTER", "MEET", host, port); err != nil {
				t.Fatalf("redistest: CLUSTER MEET on %s: %v", s.Addr, err)
			}
		}
	}
}

// startClusterNode starts one cluster-enabled node on a port p such that
// p+10000 (its cluster bus port) was free too.
func startClusterNode(t env, args []string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{bin: bin, dir: t.TempDir(), cluster: true, extra: args}
	var lastErr error
	for range 20 {
		p, err := freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if p+10000 > 65535 || !portFree(p+10000) {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		if lastErr = s.launch(); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: could not start a cluster node: %v", lastErr)
	return nil
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Shared is one Cluster for all the tests of a package (starting one
// takes about 2 s): the first [Shared.Get] starts it, [Shared.Close]
// (from TestMain, after m.Run) stops it. Safe for concurrent use.
//
//	var cluster redistest.Shared
//	func TestMain(m *testing.M) { code := m.Run(); cluster.Close(); os.Exit(code) }
//	func TestX(t *testing.T) { c := cluster.Get(t, 3) ... }
type Shared struct {
	mu    sync.Mutex
	c     *Cluster
	err   error
	dirs  []string
	stops []func()
}

// Get returns the shared cluster of n masters, starting it at the first
// call. It skips t when redis-server is missing (fails it when CI=true),
// and fails t if the cluster could not be started (then and at every later
// call). Tests that share it use distinct key prefixes; one that stops a
// node must wait for [Cluster.WaitOK] before it returns.
func (s *Shared) Get(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	servertest.Require(t, "redis-server", "redis-server")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil && s.err == nil {
		s.c, s.err = s.start(n, args)
	}
	if s.err != nil {
		t.Fatalf("%v", s.err)
	}
	if len(s.c.Nodes) != n {
		t.Fatalf("redistest: the shared cluster has %d masters, not %d", len(s.c.Nodes), n)
	}
	return s.c
}

// errFatal carries a Fatalf of the shared cluster's env out of start.
type errFatal struct{ error }

func (s *Shared) start(n int, args []string) (c *Cluster, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(errFatal)
			if !ok {
				panic(r)
			}
			err = f.error
		}
	}()
	return startMasters(sharedEnv{s}, n, args), nil
}

// Close stops the shared cluster's nodes and removes their directories.
func (s *Shared) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	for _, d := range s.dirs {
		_ = os.RemoveAll(d)
	}
	s.stops, s.dirs, s.c = nil, nil, nil
}

// sharedEnv is the env of a Shared cluster: its cleanups run at Close.
type sharedEnv struct{ s *Shared }

func (sharedEnv) Helper() {}

func (sharedEnv) Fatalf(format string, args ...any) {
	panic(errFatal{fmt.Errorf(format, args...)})
}

func (e sharedEnv) TempDir() string {
	d, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		e.Fatalf("redistest: %v", err)
	}
	e.s.dirs = append(e.s.dirs, d)
	return d
}

func (e sharedEnv) Cleanup(f func()) { e.s.stops = append(e.s.stops, f) }

// portFree reports whether 127.0.0.1:p could be bound a moment ago.
func portFree(p int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		a[i] = s.Addr
	}
	return a
}

// URL returns the cluster as a go-redis ParseClusterURL URL:
// "redis://first?addr=second&addr=third".
func (c *Cluster) URL() string {
	var b strings.Builder
	b.WriteString("redis://" + c.Nodes[0].Addr)
	for i, s := range c.Nodes[1:] {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString("addr=" + s.Addr)
	}
	return b.String()
}

// WaitOK polls every running node (a node stopped by [Server.Stop] is
// skipped) until each reports cluster_state:ok with all 16384 slots ok and
// every node known (a stopped one too), for up to 30 s, and fails t
// otherwise.
func (c *Cluster) WaitOK(t interface {
	Helper()
	Fatalf(string, ...any)
}) {
	t.Helper()
	want := fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))
	deadline := time.Now().Add(clusterTimeout)
	for {
		var bad string
		for _, s := range c.Nodes {
			if !s.running() {
				continue
			}
			info, err := s.Do("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_slots_ok:16384") || !strings.Contains(info, want) {
				bad = fmt.Sprintf("%s: %q, %v", s.Addr, info, err)
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ok after %v: %s", clusterTimeout, bad)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Flush runs FLUSHALL on every node.
func (c *Cluster) Flush(t testing.TB) {
	t.Helper()
	for _, s := range c.Nodes {
		if _, err := s.Do("FLUSHALL"); err != nil {
			t.Fatalf("redistest: FLUSHALL on %s: %v", s.Addr, err)
		}
	}
}

// Keys returns each node's DBSIZE, in the order of Nodes.
func (c *Cluster) Keys(t testing.TB) []int {
	t.Helper()
	n := make([]int, len(c.Nodes))
	for i, s := range c.Nodes {
		v, err := s.Do("DBSIZE")
		if err != nil {
			t.Fatalf("redistest: DBSIZE on %s: %v", s.Addr, err)
		}
		n[i], _ = strconv.Atoi(v)
	}
	return n
}
