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
