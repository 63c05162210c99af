package redistest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/servertest"
)

// StartWithReplicas starts a Redis Cluster of n >= 3 masters, each with one
// replica, on free 127.0.0.1 ports (each with its cluster bus port p+10000
// free too): Nodes[i], i < n, is a master with the i-th even range of the
// 16384 slots, and Nodes[n+i] its replica. Like [StartMasters] it avoids
// redis-cli's one-second waits: ADDSLOTSRANGE and SET-CONFIG-EPOCH on the
// masters, CLUSTER MEET between every pair of nodes, then CLUSTER
// REPLICATE of each replica to its master. It returns when every node
// reports cluster_state:ok, every replica's link to its master is up (its
// first sync done: it may be elected) and every node sees every replica
// as the replica of its master (so the other masters would vote for it).
//
// Extra arguments go to every redis-server, as for [Start]; a failover
// test passes a short "--cluster-node-timeout" (a replica is elected
// once its master has been unreachable that long and the masters agree it
// failed; Redis's default is 15 s; with 2000 ms, 2.9-4.6 s after a kill
// here). Every node runs with "--repl-diskless-sync-delay 0" (the
// first sync would otherwise wait 5 s). Skips when redis-server is
// missing (fails when CI=true); t.Cleanup stops every node. Starting takes
// about 2 s (the nodes agree on the slots).
//
// Roles change with failovers: Nodes keeps the order of the start, see
// [Cluster.Role] for a node's role now and [Cluster.WaitPromoted] to wait
// for a replica to take over.
func StartWithReplicas(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	servertest.Require(t, "redis-server", "redis-server")
	if n < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, not %d", n)
	}
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	c := &Cluster{replicaOf: map[*Server]*Server{}}
	for range 2 * n {
		c.Nodes = append(c.Nodes, startClusterNode(t, args))
	}
	ids := make([]string, 2*n)
	for i, s := range c.Nodes {
		id, err := s.Do("CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr, err)
		}
		ids[i] = id
	}
	join(t, c.Nodes, n)
	// A replica can follow its master once the handshake has told it the
	// master's id (ERR Unknown node before).
	deadline := time.Now().Add(clusterTimeout)
	for i := range n {
		r, m := c.Nodes[n+i], c.Nodes[i]
		c.replicaOf[r] = m
		for {
			_, err := r.Do("CLUSTER", "REPLICATE", ids[i])
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: CLUSTER REPLICATE %s on %s: %v", m.Addr, r.Addr, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c.WaitOK(t)
	for {
		bad := c.replicasBad(ids)
		if bad == "" {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replicas not ready after %v: %s", clusterTimeout, bad)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicasBad describes the first replica of c (Nodes[n:], ids in node
// order) that has not synced with its master, or that some node does not
// yet see as its master's replica; "" when there is none.
func (c *Cluster) replicasBad(ids []string) string {
	n := len(c.Nodes) / 2
	for _, r := range c.Nodes[n:] {
		info, err := r.Do("INFO", "replication")
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return fmt.Sprintf("%s: link to its master not up: %v", r.Addr, err)
		}
	}
	for _, s := range c.Nodes {
		nodes, err := s.Do("CLUSTER", "NODES")
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER NODES: %v", s.Addr, err)
		}
		for i := range n {
			// "<id> <addr> <flags> <master id> ..."
			want := false
			for _, line := range strings.Split(nodes, "\n") {
				f := strings.Fields(line)
				if len(f) > 3 && f[0] == ids[n+i] && strings.Contains(f[2], "slave") && f[3] == ids[i] {
					want = true
				}
			}
			if !want {
				return fmt.Sprintf("%s does not see %s as the replica of %s yet", s.Addr, c.Nodes[n+i].Addr, c.Nodes[i].Addr)
			}
		}
	}
	return ""
}

// Role returns s's role as its ROLE command says now ("master", "slave")
// or "" when s does not answer (stopped, paused).
func (c *Cluster) Role(s *Server) string {
	role, err := s.Do("ROLE")
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(role, "\n")
	return first
}

// WaitPromoted polls, every 5 ms, the replicas that master had when
// [StartWithReplicas] started the cluster, until one of them reports the
// role of master (it won the election after master died or was failed
// over), and returns it and the instant it was first seen as master (at
// most one poll after its promotion). It fails t after timeout.
func (c *Cluster) WaitPromoted(t testing.TB, master *Server, timeout time.Duration) (*Server, time.Time) {
	t.Helper()
	var replicas []*Server
	for r, m := range c.replicaOf {
		if m == master {
			replicas = append(replicas, r)
		}
	}
	if len(replicas) == 0 {
		t.Fatalf("redistest: %s had no replica at the start", master.Addr)
	}
	deadline := time.Now().Add(timeout)
	for {
		for _, r := range replicas {
			if c.Role(r) == "master" {
				return r, time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no replica of %s promoted within %v", master.Addr, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
