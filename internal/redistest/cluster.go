package redistest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/servertest"
)

// clusterTimeout bounds how long StartCluster3 and WaitOK wait for the
// cluster to agree on its slots.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of several masters (no replicas) started by
// [StartMasters]. Its Nodes are ordinary [Server]s: one can be stopped and
// restarted (empty, but with its cluster configuration file, so it rejoins
// with its slots), after which [Cluster.WaitOK] waits for the cluster.
type Cluster struct {
	Nodes []*Server
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
	if n < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, not %d", n)
	}
	c := &Cluster{}
	for range n {
		c.Nodes = append(c.Nodes, startClusterNode(t, args))
	}
	// What redis-cli --cluster create --cluster-replicas 0 does, without
	// its one-second sleeps: even slot ranges, then every node meets every
	// other (no waiting for gossip).
	for i, s := range c.Nodes {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr, err)
		}
		if _, err := s.Do("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			t.Fatalf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %v", s.Addr, err)
		}
	}
	for i, s := range c.Nodes {
		for _, o := range c.Nodes[i+1:] {
			host, port, _ := net.SplitHostPort(o.Addr)
			if _, err := s.Do("CLUSTER", "MEET", host, port); err != nil {
				t.Fatalf("redistest: CLUSTER MEET on %s: %v", s.Addr, err)
			}
		}
	}
	c.WaitOK(t)
	return c
}

// startClusterNode starts one cluster-enabled node on a port p such that
// p+10000 (its cluster bus port) was free too.
func startClusterNode(t testing.TB, args []string) *Server {
	t.Helper()
	bin := servertest.Require(t, "redis-server", "redis-server")
	s := &Server{bin: bin, dir: t.TempDir(), cluster: true, extra: args}
	var lastErr error
	for range 20 {
		p := servertest.FreePort(t)
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

// WaitOK polls every node until each reports cluster_state:ok with all
// 16384 slots ok and every node known, for up to 30 s, and fails t
// otherwise.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	want := fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))
	deadline := time.Now().Add(clusterTimeout)
	for {
		var bad string
		for _, s := range c.Nodes {
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
