package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// The proofs of issue 17 on a real 3-master Redis Cluster (the package's
// shared one; each test its own prefix).

// TestCRC16 checks the slot function against the specification's check
// value and against the cluster's own CLUSTER KEYSLOT, including keys
// whose Key holds braces (which must not choose the slot).
func TestCRC16(t *testing.T) {
	if got := rkredis.CRC16("123456789"); got != 0x31C3 {
		t.Fatalf("CRC16(123456789) = %#x; want 0x31c3 (Redis Cluster specification)", got)
	}
	c, client := clusterClient(t)
	l := mustNew(t, client, rkredis.Options{Prefix: "crc:", HashTag: "tenant"})
	keys := []string{"a", "per-op|operation=GET /v1/reports/{id}", "x|operation={}{a}", "p|tenant={t}|account=a", "p|tenant=acme"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k%d|network=10.%d.0.0/16", i, i))
	}
	for _, k := range keys {
		r := limiter.Request{Key: k, Limit: lim(1, time.Second, 2), Cost: 1}
		name := rkredis.RedisKey(l, r)
		got, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", name)
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(l.Slot(r)); got != want {
			t.Errorf("key %q: the cluster says slot %s, ratekey computed %s", name, got, want)
		}
	}
}

// TestClusterSpread: 100 000 distinct keys taken through the cluster land
// within ±5% of a third on every master (before: 100 000 / 0 / 0, every
// bucket behind one hash-tagged prefix).
func TestClusterSpread(t *testing.T) {
	c, client := clusterClient(t, func(o *goredis.ClusterOptions) { o.PoolSize = 32 })
	c.Flush(t)
	l := mustNew(t, client, rkredis.Options{Prefix: "spread:", Timeout: testTimeout})
	const keys, workers = 100_000, 32
	var next atomic.Int64
	race(workers, func(int) {
		ctx := t.Context()
		for {
			i := next.Add(1) - 1
			if i >= keys {
				return
			}
			r := limiter.Request{Key: fmt.Sprintf("per-ip|network=10.%d.%d.%d/32", i>>16, i>>8&255, i&255), Limit: lim(1, time.Hour, 5), Cost: 1}
			if _, err := l.Take(ctx, nil, []limiter.Request{r}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	n := c.Keys(t)
	total := 0
	for _, v := range n {
		total += v
	}
	t.Logf("keys per master: %v (total %d; a third is %d)", n, total, keys/3)
	if total != keys {
		t.Fatalf("%d keys in the cluster; want %d", total, keys)
	}
	for i, v := range n {
		if d := float64(v)/(keys/3.0) - 1; d > 0.05 || d < -0.05 {
			t.Errorf("master %d holds %d keys: %+.1f%% off a third", i, v, 100*d)
		}
	}
	c.Flush(t)
}

// used returns the whole tokens missing from r's bucket (Burst minus what
// it holds now), by a Peek of r (Cost 1).
func used(t testing.TB, l limiter.Limiter, r limiter.Request) int64 {
	t.Helper()
	d := peek(t, l, r)[0]
	if d.Allowed {
		return r.Limit.Burst - d.Remaining - 1 // Remaining counts the peeked request
	}
	return r.Limit.Burst - d.Remaining
}

// countingHook counts the script commands a client sends, alone or in a
// pipeline, except an
// EVALSHA answered NOSCRIPT (the first use of a script on a master, then
// sent again as EVAL).
type countingHook struct{ n atomic.Int64 }

func (*countingHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *countingHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && (err == nil || !goredis.HasErrorPrefix(err, "NOSCRIPT")) {
			h.n.Add(1)
		}
		return err
	}
}
func (h *countingHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	// Batched calls travel in pipelines: the same rule, per command.
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if n := cmd.Name(); (n == "evalsha" || n == "eval") && (cmd.Err() == nil || !goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT")) {
				h.n.Add(1)
			}
		}
		return err
	}
}

// TestClusterRoundTrips counts the sequential round trips (and the script
// commands) of calls within one slot and across slots.
func TestClusterRoundTrips(t *testing.T) {
	_, client := clusterClient(t)
	hook := &countingHook{}
	client.AddHook(hook)
	ctx := t.Context()
	l := mustNew(t, client, rkredis.Options{Prefix: "rt:", Timeout: testTimeout, HashTag: "tenant"})
	other := mustNew(t, client, rkredis.Options{Prefix: "rt:", Timeout: testTimeout, HashTag: "tenant"})
	l100 := lim(100, time.Second, 100)
	check := func(name string, reqs []limiter.Request, wantRounds, wantCmds int, wantAllowed bool) []limiter.Decision {
		t.Helper()
		before := hook.n.Load()
		d, rounds, err := rkredis.TakeRounds(l, ctx, reqs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cmds := int(hook.n.Load() - before)
		allowed := true
		for _, x := range d {
			allowed = allowed && x.Allowed
		}
		if rounds != wantRounds || cmds != wantCmds || allowed != wantAllowed {
			t.Errorf("%s: %d round trips, %d script commands, allowed %v; want %d, %d, %v", name, rounds, cmds, allowed, wantRounds, wantCmds, wantAllowed)
		}
		return d
	}
	// Three policies of one tenant: one slot, one script.
	tenant := []limiter.Request{
		{Key: "per-tenant|tenant=acme", Limit: l100, Cost: 1},
		{Key: "per-account|tenant=acme|account=alice", Limit: l100, Cost: 1},
		{Key: "per-op|tenant=acme|operation=GET /v1/reports/{id}", Limit: l100, Cost: 1},
	}
	check("same slot (HashTag tenant)", tenant, 1, 1, true)
	// Across slots: a network key, a tenant's, a shared one.
	cross := []limiter.Request{
		{Key: "per-ip|network=192.0.2.1/32", Limit: l100, Cost: 1},
		{Key: "per-account|tenant=acme|account=alice", Limit: l100, Cost: 1},
		{Key: "per-op|operation=GET /v1/reports/{id}", Limit: l100, Cost: 1},
	}
	slots := map[int]bool{}
	for _, r := range cross {
		slots[l.Slot(r)] = true
	}
	if len(slots) != 3 {
		t.Fatalf("the cross-slot call has %d slots; want 3", len(slots))
	}
	check("across 3 slots, admitted", cross, 2, 3, true)

	// A later policy rejects, unknown to l (another process emptied it):
	// with no hint, the later policy runs first, so the first one is
	// charged, then refunded.
	a := limiter.Request{Key: "per-ip|network=198.51.100.1/32", Limit: lim(1, time.Hour, 2), Cost: 1}
	b := limiter.Request{Key: "per-op|operation=POST /v1/jobs", Limit: lim(1, time.Hour, 2), Cost: 1}
	if l.Slot(a) == l.Slot(b) {
		t.Fatal("a and b share a slot")
	}
	take(t, other, b)
	take(t, other, b)
	sent0, _ := rkredis.Refunds(l)
	check("later part rejects", []limiter.Request{b, a}, 3, 3, false)
	if sent, lost := rkredis.Refunds(l); sent != sent0+1 || lost != 0 {
		t.Errorf("refunds: %d sent, %d lost; want 1, 0", sent-sent0, lost)
	}
	if used := used(t, l, a); used != 0 {
		t.Errorf("after the refund a has %d tokens used; want 0 (all-or-nothing)", used)
	}
	// Now l knows b is empty: b goes first, rejects, and a is only read.
	check("first part rejects", []limiter.Request{b, a}, 2, 2, false)
	if sent, _ := rkredis.Refunds(l); sent != sent0+1 {
		t.Errorf("a refund when the first part rejected")
	}
	if used := used(t, l, a); used != 0 {
		t.Errorf("a has %d tokens used; want 0", used)
	}
	// Peek across slots: one round of parallel reads.
	before := hook.n.Load()
	peek(t, l, cross...)
	if n := hook.n.Load() - before; n != 3 {
		t.Errorf("Peek across 3 slots: %d script commands; want 3", n)
	}
}

// TestClusterConcurrency: 32 goroutines (two Limiters: two processes)
// send three-policy requests (a private network bucket, a private account
// bucket of a tenant, and one shared per-operation bucket) across slots,
// with the servers' real clocks. Each bucket admits at most burst + rate·t
// over the run; and with rates too slow to refill during the test, each
// bucket's consumed tokens equal the requests admitted through it exactly:
// no policy stays charged for a request another rejected once the refunds
// have landed.
func TestClusterConcurrency(t *testing.T) {
	_, client := clusterClient(t, func(o *goredis.ClusterOptions) { o.PoolSize = 32 })
	type result struct {
		ls       [2]*rkredis.Limiter
		admitted []atomic.Int64 // per goroutine: its private buckets' admissions
		shared   atomic.Int64
		calls    atomic.Int64
		refunds  atomic.Int64 // calls that took 3 round trips (a refund)
		window   atomic.Int64 // the longest of those calls, ns: the refund window's bound
		elapsed  time.Duration
	}
	// run sends the load for d; with fresh, every fourth goroutine uses a
	// new Limiter for each call (a process that knows no hints: its
	// cross-slot calls meet rejections late, and refund).
	run := func(t *testing.T, prefix string, shared, private limiter.Limit, d time.Duration, fresh bool) *result {
		res := &result{admitted: make([]atomic.Int64, 32)}
		opts := rkredis.Options{Prefix: prefix, Timeout: testTimeout}
		for i := range res.ls {
			res.ls[i] = mustNew(t, client, opts)
		}
		start := time.Now()
		deadline := start.Add(d)
		race(32, func(g int) {
			ctx := t.Context()
			for i := 0; time.Now().Before(deadline); i++ {
				l := res.ls[g%2]
				if fresh && g%4 == 3 {
					l = mustNew(t, client, opts)
				}
				reqs := []limiter.Request{
					{Key: fmt.Sprintf("per-ip|network=10.0.0.%d/32", g), Limit: private, Cost: 1},
					{Key: fmt.Sprintf("per-account|tenant=t%d|account=a%d", g%4, g), Limit: private, Cost: 1},
					{Key: "per-op|operation=GET /v1/reports/{id}", Limit: shared, Cost: 1},
				}
				if i%2 == 1 {
					reqs[0], reqs[2] = reqs[2], reqs[0]
				}
				t0 := time.Now()
				dec, rounds, err := rkredis.TakeRounds(l, ctx, reqs)
				el := time.Since(t0)
				res.calls.Add(1)
				if err != nil {
					t.Error(err)
					return
				}
				if rounds == 3 {
					res.refunds.Add(1)
					for w := res.window.Load(); int64(el) > w && !res.window.CompareAndSwap(w, int64(el)); w = res.window.Load() {
					}
				}
				if dec[0].Allowed && dec[1].Allowed && dec[2].Allowed {
					res.admitted[g].Add(1)
					res.shared.Add(1)
				}
			}
		})
		res.elapsed = time.Since(start)
		return res
	}

	t.Run("Bound", func(t *testing.T) {
		shared, private := lim(200, time.Second, 20), lim(20, time.Second, 5)
		res := run(t, "conc-bound:", shared, private, 2*time.Second, true)
		secs := res.elapsed.Seconds()
		if max := 20 + 200*secs; float64(res.shared.Load()) > max {
			t.Errorf("shared bucket admitted %d in %.2fs; at most %.0f (burst + rate·t)", res.shared.Load(), secs, max)
		}
		for g := range 32 {
			if a, max := res.admitted[g].Load(), 5+20*secs; float64(a) > max {
				t.Errorf("private buckets of %d admitted %d in %.2fs; at most %.0f", g, a, secs, max)
			}
		}
		for _, l := range res.ls {
			if _, lost := rkredis.Refunds(l); lost != 0 {
				t.Errorf("%d refunds lost", lost)
			}
		}
		t.Logf("%d calls in %.2fs: shared bucket admitted %d (bound burst + rate·t = %.0f); %d calls refunded (%.2f%%), the longest in %v",
			res.calls.Load(), secs, res.shared.Load(), 20+200*secs, res.refunds.Load(), 100*float64(res.refunds.Load())/float64(res.calls.Load()), time.Duration(res.window.Load()))
	})

	t.Run("Accounting", func(t *testing.T) {
		shared, private := lim(1, time.Hour, 100), lim(1, time.Hour, 8)
		res := run(t, "conc-acct:", shared, private, time.Second, true)
		l := res.ls[0]
		if used := used(t, l, limiter.Request{Key: "per-op|operation=GET /v1/reports/{id}", Limit: shared, Cost: 1}); used != res.shared.Load() {
			t.Errorf("shared bucket: %d tokens used, %d requests admitted", used, res.shared.Load())
		}
		for g := range 32 {
			for _, k := range []string{fmt.Sprintf("per-ip|network=10.0.0.%d/32", g), fmt.Sprintf("per-account|tenant=t%d|account=a%d", g%4, g)} {
				if used := used(t, l, limiter.Request{Key: k, Limit: private, Cost: 1}); used != res.admitted[g].Load() {
					t.Errorf("%s: %d tokens used, %d requests admitted", k, used, res.admitted[g].Load())
				}
			}
		}
		if res.refunds.Load() == 0 {
			t.Error("no call was refunded: the test proves nothing about refunds")
		}
		t.Logf("%d calls, %d admitted, %d refunded (%.2f%%, the longest in %v); every bucket's use equals its admissions",
			res.calls.Load(), res.shared.Load(), res.refunds.Load(), 100*float64(res.refunds.Load())/float64(res.calls.Load()), time.Duration(res.window.Load()))
	})
}

// TestClusterZipfRefunds: a Zipf workload (1 000 clients, s = 1.1, a few
// heavy ones far over their limit) of two-policy requests (the client's
// own bucket and its tenant's, in different slots): refunds on at most 1%
// of the requests, once the hints know the emptied buckets.
func TestClusterZipfRefunds(t *testing.T) {
	_, client := clusterClient(t, func(o *goredis.ClusterOptions) { o.PoolSize = 8 })
	l := mustNew(t, client, rkredis.Options{Prefix: "zipf:", Timeout: testTimeout})
	const n, workers = 20_000, 8
	var next, rejected atomic.Int64
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, 999)
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = zipf.Uint64()
	}
	_ = rng
	race(workers, func(int) {
		ctx := t.Context()
		for {
			i := next.Add(1) - 1
			if i >= n {
				return
			}
			mu.Lock()
			c := ids[i]
			mu.Unlock()
			reqs := []limiter.Request{
				{Key: fmt.Sprintf("per-tenant|tenant=t%d", c%10), Limit: lim(2000, time.Second, 200), Cost: 1},
				{Key: fmt.Sprintf("per-client|account=c%d", c), Limit: lim(50, time.Second, 20), Cost: 1},
			}
			d, err := l.Take(ctx, nil, reqs)
			if err != nil {
				t.Error(err)
				return
			}
			if !d[0].Allowed || !d[1].Allowed {
				rejected.Add(1)
			}
		}
	})
	sent, lost := rkredis.Refunds(l)
	t.Logf("%d requests: %d rejected (%.1f%%), %d refunds (%.2f%%), %d lost", n, rejected.Load(), 100*float64(rejected.Load())/n, sent, 100*float64(sent)/n, lost)
	if float64(sent) > 0.01*n {
		t.Errorf("%d refunds in %d requests: more than 1%%", sent, n)
	}
	if rejected.Load() == 0 {
		t.Error("nothing rejected: the workload does not exercise refunds")
	}
}

// TestClusterMasterRestart: a master is killed (SIGKILL) mid-load and
// restarted empty. Calls that need it fail (an error: the caller's fail
// mode) within the timeout, calls on other masters go on being decided,
// and once it is back, decisions on its slots resume by themselves; no
// panic.
func TestClusterMasterRestart(t *testing.T) {
	c, client := clusterClient(t, func(o *goredis.ClusterOptions) { o.MaxRetries = 0 })
	l := mustNew(t, client, rkredis.Options{Prefix: "fault:", Timeout: faultTimeout})
	ctx := t.Context()
	// One key per master: the slot ranges are even, in node order.
	keys := make([]limiter.Request, 3)
	for i, found := 0, 0; found < 3; i++ {
		r := limiter.Request{Key: "k" + strconv.Itoa(i), Limit: lim(1000, time.Second, 1000), Cost: 1}
		m := l.Slot(r) * 3 / 16384
		if keys[m].Key == "" {
			keys[m] = r
			found++
		}
	}
	for _, r := range keys {
		take(t, l, r)
	}
	victim := c.Nodes[1]
	killed := time.Now()
	victim.Stop()
	defer func() { // leave the shared cluster whole for the other tests
		victim.Restart(t)
		c.WaitOK(t)
	}()
	var worst time.Duration
	for range 20 {
		start := time.Now()
		_, err := l.Take(ctx, nil, []limiter.Request{keys[1]})
		el := time.Since(start)
		worst = max(worst, el)
		if err == nil {
			t.Fatal("a call on the killed master's slot was decided")
		}
		if el > faultTimeout+lateness {
			t.Errorf("a call on the killed master took %v; want the timeout (%v)", el, faultTimeout)
		}
		if _, err := l.Take(ctx, nil, []limiter.Request{keys[0]}); err != nil {
			t.Errorf("a call on a live master failed: %v", err)
		}
		// Across slots, with the dead one: an error, never a decision.
		if d, err := l.Take(ctx, nil, []limiter.Request{keys[0], keys[1], keys[2]}); err == nil {
			t.Fatalf("a call across slots including the dead master was decided: %+v", d)
		}
	}
	t.Logf("master down: every call on it failed, the slowest in %v (timeout %v); other masters kept deciding", worst, faultTimeout)
	victim.Restart(t)
	restarted := time.Now()
	var back time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := l.Take(ctx, nil, []limiter.Request{keys[1]}); err == nil {
			back = time.Since(restarted)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("decisions on the restarted master did not resume within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d, err := l.Take(ctx, nil, []limiter.Request{keys[0], keys[1], keys[2]}); err != nil || !d[1].Allowed {
		t.Fatalf("after the restart, across slots: %+v, %v", d, err)
	}
	t.Logf("killed at 0, restarted after %v, decisions resumed %v after the restart", restarted.Sub(killed).Round(time.Millisecond), back.Round(time.Millisecond))
	if s := victim.Logs(); strings.Contains(s, "panic") {
		t.Errorf("server log: %s", s)
	}
}
