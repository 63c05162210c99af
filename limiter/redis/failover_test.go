package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// failoverResume is how soon after a replica's promotion every key must
// decide again (issue 24).
const failoverResume = 2 * time.Second

// failoverWatch is how long after the promotion the test waits for every
// key to decide before it gives up.
const failoverWatch = 5 * time.Second

// sweep is one round of a failover test's load: one Take per call, all at
// once.
type sweep struct {
	start, end time.Time
	failed     int   // calls that failed
	err        error // one of their errors
	down       int   // calls refused with CLUSTERDOWN
}

// sweeper runs sweeps of one Take per call, one after the other, from
// startSweeps until stop.
type sweeper struct {
	mu   sync.Mutex
	all  []sweep
	quit chan struct{}
	done chan struct{}
}

func startSweeps(l *rkredis.Limiter, calls [][]limiter.Request) *sweeper {
	sw := &sweeper{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sw.done)
		for {
			select {
			case <-sw.quit:
				return
			default:
			}
			s := sweep{start: time.Now()}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, reqs := range calls {
				wg.Go(func() {
					_, err := l.Take(context.Background(), nil, reqs)
					if err != nil {
						mu.Lock()
						s.failed++
						s.err = err
						if goredis.IsClusterDownError(err) {
							s.down++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			s.end = time.Now()
			sw.mu.Lock()
			sw.all = append(sw.all, s)
			sw.mu.Unlock()
		}
	}()
	return sw
}

// sweeps returns the sweeps done so far.
func (sw *sweeper) sweeps() []sweep {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return slices.Clone(sw.all)
}

// stop ends the sweeps and waits for the one under way.
func (sw *sweeper) stop() {
	close(sw.quit)
	<-sw.done
}

// TestMasterKilledReplicaPromoted (issue 24, defect 4): on a Cluster of 3
// masters with a replica each (cluster-node-timeout 2000), a master is
// killed (SIGKILL) while 30 keys spread over the 3 masters are decided
// without pause (and a call across slots of the 3 masters); its replica
// wins the election about 3 s later. Every key must decide again within
// 2 s of the promotion: the Limiter asks go-redis
// to reload its slot map on the errors of a dead or moved master, where
// go-redis alone kept sending the dead master's slots to it until its
// 60 s reload (9 of 30 keys failed for 55 s in the demo).
func TestMasterKilledReplicaPromoted(t *testing.T) {
	c := redistest.StartWithReplicas(t, 3, "--cluster-node-timeout", "2000")
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	l := mustNew(t, client, rkredis.Options{Prefix: "failover:", Timeout: faultTimeout})

	// 10 keys on each master (the slot ranges are even, in node order),
	// each a call, and a call of one key per master.
	var keys []limiter.Request
	per := make([]int, 3)
	for i := 0; len(keys) < 30; i++ {
		r := limiter.Request{Key: fmt.Sprintf("k%d", i), Limit: lim(1000, time.Second, 1000), Cost: 1}
		if m := l.Slot(r) * 3 / 16384; per[m] < 10 {
			per[m]++
			keys = append(keys, r)
		}
	}
	var calls [][]limiter.Request
	across := make([]limiter.Request, 3)
	for _, r := range keys {
		calls = append(calls, []limiter.Request{r})
		across[l.Slot(r)*3/16384] = r
	}
	calls = append(calls, across)
	for _, reqs := range calls {
		take(t, l, reqs...)
	}

	sw := startSweeps(l, calls)
	defer sw.stop()
	time.Sleep(200 * time.Millisecond) // a few sweeps before the kill
	victim := c.Nodes[0]
	victim.Stop()
	killed := time.Now()
	_, promoted := c.WaitPromoted(t, victim, 20*time.Second)
	t.Logf("replica promoted %v after the kill", promoted.Sub(killed).Round(time.Millisecond))

	// The first sweep that starts after the promotion and decides every
	// key: all of them decided again by its end.
	var resumed time.Time
	var failing, worst sweep       // the last sweep after the kill with a failure, the one with most
	var downFrom, downTo time.Time // the first and last sweeps with a CLUSTERDOWN
	for deadline := promoted.Add(failoverWatch); resumed.IsZero(); time.Sleep(20 * time.Millisecond) {
		for _, s := range sw.sweeps() {
			if s.start.After(killed) && s.failed > 0 {
				failing = s
				if s.failed > worst.failed {
					worst = s
				}
				if s.down > 0 {
					if downFrom.IsZero() {
						downFrom = s.start
					}
					downTo = s.end
				}
			}
			if !s.start.Before(promoted) && s.failed == 0 {
				resumed = s.end
				break
			}
		}
		if resumed.IsZero() && time.Now().After(deadline) {
			t.Fatalf("%d of %d calls still failed %v after the promotion (%v); want every call deciding within %v",
				failing.failed, len(calls), failoverWatch, failing.err, failoverResume)
		}
	}
	t.Logf("every key decided again %v after the promotion (%v after the kill); the last sweep with failures: %d of %d calls, e.g. %v",
		resumed.Sub(promoted).Round(time.Millisecond), resumed.Sub(killed).Round(time.Millisecond), failing.failed, len(calls), failing.err)
	t.Logf("the sweep with most failures, %v after the kill: %d of %d calls (%d CLUSTERDOWN), e.g. %v",
		worst.start.Sub(killed).Round(time.Millisecond), worst.failed, len(calls), worst.down, worst.err)
	if !downFrom.IsZero() {
		t.Logf("CLUSTERDOWN (every master refuses every key while a slot has none) in the sweeps from %v to %v after the kill",
			downFrom.Sub(killed).Round(time.Millisecond), downTo.Sub(killed).Round(time.Millisecond))
	}
	if d := resumed.Sub(promoted); d > failoverResume {
		t.Errorf("every key decided again %v after the promotion; want at most %v", d, failoverResume)
	}
	// And they keep deciding: the routing does not flip back. (A call may
	// time out on a machine busy enough to stall the process for the
	// timeout; a wrong route fails otherwise: refused, CLUSTERDOWN.)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var after []sweep
		for _, s := range sw.sweeps() {
			if s.start.After(resumed) {
				after = append(after, s)
			}
		}
		for _, s := range after {
			if s.failed > 0 && !errors.Is(s.err, rkredis.ErrTimeout) {
				t.Fatalf("a sweep after every key had decided again: %d of %d calls failed: %v", s.failed, len(calls), s.err)
			}
		}
		if len(after) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d sweeps in 10 s", len(after))
		}
	}
}
