package redistest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
)

// TestStartMasters checks that three masters share the 16384 slots, and
// that a node stopped and restarted rejoins with its slots.
func TestStartMasters(t *testing.T) {
	start := time.Now()
	c := redistest.StartMasters(t, 3)
	t.Logf("cluster of 3 masters up in %v", time.Since(start).Round(time.Millisecond))
	for _, s := range c.Nodes {
		info, err := s.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_size:3") {
			t.Fatalf("%s: %q, %v", s.Addr, info, err)
		}
	}
	start = time.Now()
	c.Nodes[2].Restart(t)
	c.WaitOK(t)
	t.Logf("node restarted and cluster ok in %v", time.Since(start).Round(time.Millisecond))
	if got := c.Keys(t); len(got) != 3 || got[0]+got[1]+got[2] != 0 {
		t.Fatalf("Keys: %v", got)
	}
	if u := c.URL(); !strings.HasPrefix(u, "redis://127.0.0.1:") || strings.Count(u, "addr=") != 2 {
		t.Fatalf("URL %q", u)
	}
}

// TestStartWithReplicas checks that each of three masters has its replica,
// that the replica of a master killed with SIGKILL is promoted (about 3 s
// with a 2 s node timeout), and that the old master restarted rejoins as a
// replica.
func TestStartWithReplicas(t *testing.T) {
	start := time.Now()
	c := redistest.StartWithReplicas(t, 3, "--cluster-node-timeout", "2000")
	t.Logf("cluster of 3 masters and 3 replicas up in %v", time.Since(start).Round(time.Millisecond))
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	for i, s := range c.Nodes {
		want := "master"
		if i >= 3 {
			want = "slave"
		}
		if got := c.Role(s); got != want {
			t.Fatalf("node %d (%s): role %q, want %q", i, s.Addr, got, want)
		}
	}
	old := c.Nodes[1]
	old.Stop()
	killed := time.Now()
	promoted, at := c.WaitPromoted(t, old, 20*time.Second)
	if promoted != c.Nodes[4] {
		t.Fatalf("promoted %s, want the replica %s", promoted.Addr, c.Nodes[4].Addr)
	}
	t.Logf("master killed, its replica promoted %v later", at.Sub(killed).Round(time.Millisecond))
	c.WaitOK(t) // the stopped node is skipped
	if c.Role(old) != "" {
		t.Fatalf("a stopped node has a role")
	}
	old.Restart(t)
	c.WaitOK(t)
	for deadline := time.Now().Add(10 * time.Second); c.Role(old) != "slave"; {
		if time.Now().After(deadline) {
			t.Fatalf("the old master restarted: role %q, want slave", c.Role(old))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
