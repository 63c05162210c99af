package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

var _ limiter.Limiter = (*rkredis.Limiter)(nil)

const ms = time.Millisecond

// testTimeout is the per-call timeout of tests that are not about
// time-outs: generous, for a loaded machine (16 new connections at once
// under -race on 2 shared cores can take more than the 100ms default).
const testTimeout = 10 * time.Second

func lim(count int64, per time.Duration, b int64) limiter.Limit {
	return limiter.Limit{Rate: limiter.Rate{Count: count, Per: per}, Burst: b}
}

func mustNew(t testing.TB, c goredis.UniversalClient, o rkredis.Options) *rkredis.Limiter {
	t.Helper()
	l, err := rkredis.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// take and peek return the verdicts of a call: its Decisions without the
// diagnostics of how the store reached them (HashSlot, RoundTrips; see
// TestDiagnostics), so that they compare with the memory store's.
func take(t testing.TB, l limiter.Limiter, reqs ...limiter.Request) []limiter.Decision {
	t.Helper()
	d, err := l.Take(context.Background(), nil, reqs)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return verdicts(d)
}

func peek(t testing.TB, l limiter.Limiter, reqs ...limiter.Request) []limiter.Decision {
	t.Helper()
	d, err := l.Peek(context.Background(), nil, reqs)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	return verdicts(d)
}

// verdicts clears the diagnostics of ds (HashSlot, RoundTrips).
func verdicts(ds []limiter.Decision) []limiter.Decision {
	for i := range ds {
		ds[i].HashSlot, ds[i].RoundTrips = 0, 0
	}
	return ds
}

func do(t testing.TB, srv *redistest.Server, args ...string) string {
	t.Helper()
	v, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

func doInt(t testing.TB, srv *redistest.Server, args ...string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(do(t, srv, args...), 10, 64)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return n
}

// serverNow returns the Redis server's TIME in ns since the epoch.
func serverNow(t testing.TB, srv *redistest.Server) int64 {
	t.Helper()
	parts := strings.Split(do(t, srv, "TIME"), "\n")
	s, _ := strconv.ParseInt(parts[0], 10, 64)
	us, _ := strconv.ParseInt(parts[1], 10, 64)
	return s*1e9 + us*1e3
}

func TestNewOptions(t *testing.T) {
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer plain.Close()
	noCtx := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer noCtx.Close()
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer cluster.Close()
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	tests := []struct {
		name    string
		c       goredis.UniversalClient
		o       rkredis.Options
		wantErr string
	}{
		{"defaults", plain, rkredis.Options{}, ""},
		{"nil client", nil, rkredis.Options{}, "nil client"},
		{"no ContextTimeoutEnabled", noCtx, rkredis.Options{}, "ContextTimeoutEnabled"},
		{"negative timeout", plain, rkredis.Options{Timeout: -1}, "timeout -1ns"},
		{"short MaxKeyLen", plain, rkredis.Options{MaxKeyLen: rkredis.MinMaxKeyLen - 1}, "max key length 95"},
		{"MinMaxKeyLen", plain, rkredis.Options{MaxKeyLen: rkredis.MinMaxKeyLen}, ""},
		{"long prefix", plain, rkredis.Options{Prefix: strings.Repeat("p", rkredis.MaxPrefixLen+1)}, "prefix of 129 bytes"},
		// The hash tag follows the prefix: "app1{...}23x..." and
		// "app12{...}3x..." differ, so a prefix may end in a digit.
		{"prefix ending in a digit", plain, rkredis.Options{Prefix: "app1"}, ""},
		{"prefix ending in a separator", plain, rkredis.Options{Prefix: "app1:"}, ""},
		// A brace in the prefix would choose the slot of every key.
		{"prefix with a hash tag", plain, rkredis.Options{Prefix: "rk:{rl}:"}, `prefix "rk:{rl}:" holds '{' or '}'`},
		{"prefix with a closing brace", cluster, rkredis.Options{Prefix: "rk:}"}, "holds '{' or '}'"},
		{"prefix with an open brace", ring, rkredis.Options{Prefix: "rk:{x:"}, "holds '{' or '}'"},
		{"cluster, defaults", cluster, rkredis.Options{}, ""},
		{"ring, defaults", ring, rkredis.Options{Prefix: "rk:"}, ""},
		{"hash tag dimension", cluster, rkredis.Options{HashTag: "tenant"}, ""},
		{"hash tag dimension of 32 bytes", cluster, rkredis.Options{HashTag: "a" + strings.Repeat("_", 31)}, ""},
		{"hash tag not a dimension", cluster, rkredis.Options{HashTag: "Tenant"}, `hash tag "Tenant" is not a dimension name`},
		{"hash tag with braces", cluster, rkredis.Options{HashTag: "{x}"}, "is not a dimension name"},
		{"hash tag of 33 bytes", cluster, rkredis.Options{HashTag: strings.Repeat("a", 33)}, "is not a dimension name"},
	}
	for _, tc := range tests {
		l, err := rkredis.New(tc.c, tc.o)
		if tc.wantErr == "" {
			if err != nil || l == nil {
				t.Errorf("%s: New = %v, %v; want a Limiter", tc.name, l, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || l != nil {
			t.Errorf("%s: New = %v, %v; want an error containing %q", tc.name, l, err, tc.wantErr)
		}
	}
}

func TestRedisKey(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	l := mustNew(t, c, rkredis.Options{})
	r := limiter.Request{Key: "per-account|tenant=acme|account=alice", Limit: lim(2, time.Second, 3), Cost: 1}
	// The tag is 8 hex digits of a hash of the whole key: pinned, since
	// every process (and version) must name a bucket alike.
	if got, want := rkredis.RedisKey(l, r), "ratekey:{f33feb73}3x500000000ns:per-account|tenant=acme|account=alice"; got != want {
		t.Errorf("RedisKey = %q; want %q", got, want)
	}
	// With HashTag "tenant", the tag is a hash of "tenant=acme": every
	// bucket of the tenant shares it, whatever the policy and shape.
	byTenant := mustNew(t, c, rkredis.Options{HashTag: "tenant"})
	if got, want := rkredis.RedisKey(byTenant, r), "ratekey:{9520be4b}3x500000000ns:per-account|tenant=acme|account=alice"; got != want {
		t.Errorf("RedisKey with HashTag tenant = %q; want %q", got, want)
	}
	for _, k := range []string{"per-tenant|tenant=acme", "x|network=10.0.0.0/24|tenant=acme|operation=GET /v1/{id}"} {
		o := limiter.Request{Key: k, Limit: lim(1, time.Minute, 9), Cost: 1}
		if got := rkredis.RedisKey(byTenant, o); !strings.HasPrefix(got, "ratekey:{9520be4b}9x") {
			t.Errorf("RedisKey(%q) with HashTag tenant = %q; want the tenant's tag", k, got)
		}
	}
	// "tenant=acmex" and a policy named "tenant=acme" are other tags.
	for _, k := range []string{"p|tenant=acmex", "p|account=tenant=acme"} {
		o := limiter.Request{Key: k, Limit: lim(1, time.Minute, 9), Cost: 1}
		if got := rkredis.RedisKey(byTenant, o); strings.HasPrefix(got, "ratekey:{9520be4b}") {
			t.Errorf("RedisKey(%q) with HashTag tenant = %q: the tag of tenant=acme", k, got)
		}
	}
	// The same shape written differently names the same bucket; another
	// shape another one; delay_after and max_delay do not count.
	same := r
	same.Limit = lim(120, time.Minute, 3)
	same.Limit.DelayAfter, same.Limit.MaxDelay = 1, time.Second
	if rkredis.RedisKey(l, same) != rkredis.RedisKey(l, r) {
		t.Errorf("120/m and 2/s name different buckets: %q, %q", rkredis.RedisKey(l, same), rkredis.RedisKey(l, r))
	}
	other := r
	other.Limit.Burst = 4
	if rkredis.RedisKey(l, other) == rkredis.RedisKey(l, r) {
		t.Error("burst 3 and 4 share a bucket")
	}

	// Long keys: bounded, readable prefix kept, hashed with the secret.
	const max = rkredis.DefaultMaxKeyLen
	// (the tag, a hash of the whole key, differs per key: tagged(k) is
	// "ratekey:{" + 8 hex digits + "}3x500000000ns:" + k, with those 8
	// digits taken from the name).
	const tagged = len("ratekey:{f33feb73}")
	exact := r
	exact.Key = strings.Repeat("a", max)
	if got := rkredis.RedisKey(l, exact); got != got[:tagged]+"3x500000000ns:"+exact.Key || got[:9] != "ratekey:{" || got[tagged-1] != '}' {
		t.Errorf("a key of exactly MaxKeyLen bytes was changed: %q", got)
	}
	long := r
	long.Key = strings.Repeat("a", max) + "b"
	got := rkredis.RedisKey(l, long)
	base := got[:tagged] + "3x500000000ns:"
	if len(got) != len(base)+max+1 || !strings.HasPrefix(got, base+strings.Repeat("a", max-64)+"#") {
		t.Errorf("hashed key %q: want %d bytes, the first %d key bytes and '#'", got, len(base)+max+1, max-64)
	}
	long2 := long
	long2.Key = strings.Repeat("a", max) + "c"
	if rkredis.RedisKey(l, long2) == got {
		t.Error("two long keys differing in their last byte share a name")
	}
	secret := mustNew(t, c, rkredis.Options{HashSecret: []byte("0123456789abcdef0123456789abcdef")})
	if s := rkredis.RedisKey(secret, long); s == got || len(s) != len(got) {
		t.Errorf("HashSecret did not change the hash: %q", s)
	}
	again := mustNew(t, c, rkredis.Options{HashSecret: []byte("0123456789abcdef0123456789abcdef")})
	if rkredis.RedisKey(again, long) != rkredis.RedisKey(secret, long) {
		t.Error("two Limiters with one secret name a long key differently: processes would not share its budget")
	}
	small := mustNew(t, c, rkredis.Options{Prefix: "p:", MaxKeyLen: rkredis.MinMaxKeyLen})
	k := rkredis.RedisKey(small, long)
	if want := "p:" + k[2:12] + "3x500000000ns:" + strings.Repeat("a", 32) + "#"; !strings.HasPrefix(k, want) || len(k) != len("p:{f33feb73}3x500000000ns:")+rkredis.MinMaxKeyLen+1 {
		t.Errorf("MinMaxKeyLen: %q", k)
	}
}

// TestLongKeysShareBudget: two Limiters (processes) with the same options
// share the bucket of a hashed key.
func TestLongKeysShareBudget(t *testing.T) {
	srv := redistest.Start(t)
	o := rkredis.Options{Timeout: testTimeout, MaxKeyLen: 100, HashSecret: []byte("shared secret of the deployment!")}
	a := mustNew(t, newClient(t, srv.Addr), o)
	b := mustNew(t, newClient(t, srv.Addr), o)
	r := limiter.Request{Key: strings.Repeat("x", 500), Limit: lim(1, time.Minute, 2), Cost: 1}
	take(t, a, r)
	take(t, b, r)
	if d := take(t, a, r)[0]; d.Allowed {
		t.Errorf("third request over two processes allowed: %+v", d)
	}
	if n := doInt(t, srv, "DBSIZE"); n != 1 {
		t.Errorf("DBSIZE = %d; want 1", n)
	}
	if k := do(t, srv, "KEYS", "*"); len(k) != len("ratekey:{01234567}2x60000000000ns:")+101 {
		t.Errorf("key %q: not bounded", k)
	}
}

// TestExpiryAndValue uses the server's real clock: the stored value is the
// TAT in ns, its expiry is the TAT rounded up to a whole ms (PXAT); a
// rejection changes neither; Peek writes nothing; once the key expires, the
// bucket is full, and the key never expires before its TAT.
func TestExpiryAndValue(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Timeout: testTimeout})
	checkExpiry := func(step, key string, tat int64) {
		t.Helper()
		want := (tat + 999_999) / 1_000_000 // ceil to ms
		if got := doInt(t, srv, "PEXPIRETIME", key); got != want {
			t.Errorf("%s: PEXPIRETIME %d; want the TAT %d rounded up to ms, %d", step, got, tat, want)
		}
	}

	// A slow bucket (1/min): no token comes back while the test runs.
	slow := limiter.Request{Key: "slow", Limit: lim(1, time.Minute, 2), Cost: 1}
	key := rkredis.RedisKey(l, slow)
	peek(t, l, slow)
	if n := doInt(t, srv, "DBSIZE"); n != 0 {
		t.Fatalf("Peek wrote %d keys", n)
	}
	before := serverNow(t, srv)
	d1 := take(t, l, slow)[0]
	after := serverNow(t, srv)
	tat := doInt(t, srv, "GET", key)
	if tat < before+int64(time.Minute) || tat > after+int64(time.Minute) || d1 != (limiter.Decision{Allowed: true, Remaining: 1, ResetAfter: time.Minute}) {
		t.Fatalf("after one take: TAT %d not in [%d, %d] + 1m, or decision %+v", tat, before, after, d1)
	}
	checkExpiry("first take", key, tat)
	if d := take(t, l, slow)[0]; !d.Allowed || d.Remaining != 0 {
		t.Fatalf("second take: %+v", d)
	}
	tat = doInt(t, srv, "GET", key)
	checkExpiry("second take", key, tat)
	pttl := doInt(t, srv, "PTTL", key)
	for i := range 5 {
		if d := take(t, l, slow)[0]; d.Allowed {
			t.Fatalf("take %d over the burst allowed: %+v", i+3, d)
		}
		if got := doInt(t, srv, "GET", key); got != tat {
			t.Fatalf("a rejection changed the TAT from %d to %d", tat, got)
		}
		checkExpiry("after a rejection", key, tat)
		p := doInt(t, srv, "PTTL", key)
		if p > pttl {
			t.Fatalf("a rejection extended the PTTL from %d to %d", pttl, p)
		}
		pttl = p
	}
	peek(t, l, slow)
	checkExpiry("after a Peek", key, tat)

	// A fast bucket (20/s, burst 2: full again 100ms after being emptied):
	// wait for real expiry.
	fast := limiter.Request{Key: "fast", Limit: lim(20, time.Second, 2), Cost: 2}
	key = rkredis.RedisKey(l, fast)
	if d := take(t, l, fast)[0]; !d.Allowed {
		t.Fatalf("fast take: %+v", d)
	}
	tat = doInt(t, srv, "GET", key)
	checkExpiry("fast take", key, tat)
	deadline := time.Now().Add(5 * time.Second)
	for doInt(t, srv, "EXISTS", key) == 1 {
		if time.Now().After(deadline) {
			t.Fatal("the key did not expire")
		}
		time.Sleep(2 * ms)
	}
	if now := serverNow(t, srv); now < tat {
		t.Errorf("the key expired at %d, before its TAT %d", now, tat)
	}
	if d := take(t, l, fast)[0]; d != (limiter.Decision{Allowed: true, Remaining: 0, ResetAfter: 100 * ms}) {
		t.Errorf("first take after expiry: %+v; want a full bucket", d)
	}
}

// TestServerTimeExact: on the server's clock, a fresh bucket's decision is
// exact to the nanosecond at the largest window accepted, and one more
// nanosecond of window is refused.
func TestServerTimeExact(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Timeout: testTimeout})
	edge := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: rkredis.MaxWindow}, Burst: 1}
	r := limiter.Request{Key: "edge", Limit: edge, Cost: 1}
	if d := take(t, l, r)[0]; d != (limiter.Decision{Allowed: true, ResetAfter: rkredis.MaxWindow}) {
		t.Errorf("take at the largest window: %+v", d)
	}
	d := peek(t, l, r)[0]
	if d.Allowed || d.RetryAfter > rkredis.MaxWindow || d.RetryAfter < rkredis.MaxWindow-time.Second || d.RetryAfter != d.ResetAfter {
		t.Errorf("peek after: %+v", d)
	}
	over := r
	over.Limit.Rate.Per++
	for name, f := range map[string]func(context.Context, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error){"Take": l.Take, "Peek": l.Peek} {
		if _, err := f(context.Background(), nil, []limiter.Request{over}); !errors.Is(err, limiter.ErrInvalidRequest) || !strings.Contains(err.Error(), "2^53") {
			t.Errorf("%s of a window over 2^53ns: %v; want ErrInvalidRequest", name, err)
		}
	}
}

// TestTestClockExactAtEdges compares the Redis store with the memory store
// (the shared Decide) at the edges of exactness: the largest window, 1ns
// intervals, absolute times whose ns do not fit a double, debts 1ns from a
// decision boundary.
func TestTestClockExactAtEdges(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	clk := clocktest.NewManualClock()
	rl, err := rkredis.NewWithTestClock(client, rkredis.Options{Timeout: testTimeout, DenyCache: -1}, clk.Time) // every decision from the script
	if err != nil {
		t.Fatal(err)
	}
	ml := memory.New(memory.Options{Now: clk.Time})
	edge := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: rkredis.MaxWindow / 4}, Burst: 4}
	ns := limiter.Limit{Rate: limiter.Rate{Count: 1_000_000_000, Per: time.Second}, Burst: 1 << 20}
	rounded := limiter.Limit{Rate: limiter.Rate{Count: 7, Per: time.Minute}, Burst: 3, DelayAfter: 1, MaxDelay: 5 * time.Second}
	start := time.Duration(1_796_021_755_172_450_123) // a Unix time in ns: beyond 2^53
	steps := []struct {
		at   time.Duration
		reqs []limiter.Request
	}{
		{start, []limiter.Request{{Key: "e", Limit: edge, Cost: 3}, {Key: "n", Limit: ns, Cost: 1 << 19}, {Key: "r", Limit: rounded, Cost: 1}}},
		{start + 1, []limiter.Request{{Key: "e", Limit: edge, Cost: 1}, {Key: "n", Limit: ns, Cost: 1<<19 + 1}}},
		{start + 1, []limiter.Request{{Key: "e", Limit: edge, Cost: 2}}},
		{start + rkredis.MaxWindow/4 - 1, []limiter.Request{{Key: "e", Limit: edge, Cost: 2}}},
		{start + rkredis.MaxWindow/4, []limiter.Request{{Key: "e", Limit: edge, Cost: 2}}},
		{start + rkredis.MaxWindow/4 + 3, []limiter.Request{{Key: "e", Limit: edge, Cost: 1}, {Key: "n", Limit: ns, Cost: 1 << 20}, {Key: "r", Limit: rounded, Cost: 2}}},
		{start + rkredis.MaxWindow, []limiter.Request{{Key: "e", Limit: edge, Cost: 4}, {Key: "r", Limit: rounded, Cost: 3}}},
		{start + 2*rkredis.MaxWindow, []limiter.Request{{Key: "e", Limit: edge, Cost: 4}, {Key: "r", Limit: rounded, Cost: 1}, {Key: "r", Limit: rounded, Cost: 1}}},
		{start + 2*rkredis.MaxWindow + 8571428572, []limiter.Request{{Key: "r", Limit: rounded, Cost: 1}}},
		{start + 2*rkredis.MaxWindow + 8571428572 + 1, []limiter.Request{{Key: "r", Limit: rounded, Cost: 1}, {Key: "e", Limit: edge, Cost: 1}}},
	}
	for i, s := range steps {
		clk.Set(s.at)
		for _, op := range []string{"Peek", "Take"} {
			var got, want []limiter.Decision
			if op == "Peek" {
				got, want = peek(t, rl, s.reqs...), peek(t, ml, s.reqs...)
			} else {
				got, want = take(t, rl, s.reqs...), take(t, ml, s.reqs...)
			}
			for j := range want {
				if got[j] != want[j] {
					t.Errorf("step %d %s request %d: redis %+v; memory %+v", i, op, j, got[j], want[j])
				}
			}
		}
	}
}

// TestStoreErrorsAreErrors: a bucket key holding something else fails the
// call (never a decision), alone or with another request, and the script
// writes nothing.
func TestStoreErrorsAreErrors(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Timeout: testTimeout})
	good := limiter.Request{Key: "good", Limit: lim(1, time.Minute, 5), Cost: 1}
	bad := limiter.Request{Key: "bad", Limit: lim(1, time.Minute, 5), Cost: 1}
	for name, setup := range map[string][]string{
		"wrong type":  {"HSET", rkredis.RedisKey(l, bad), "f", "v"},
		"not decimal": {"SET", rkredis.RedisKey(l, bad), "garbage-value"},
	} {
		do(t, srv, "DEL", rkredis.RedisKey(l, bad))
		do(t, srv, setup...)
		for op, f := range map[string]func(context.Context, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error){"Take": l.Take, "Peek": l.Peek} {
			for _, reqs := range [][]limiter.Request{{good, bad}, {bad}} {
				d, err := f(context.Background(), nil, reqs)
				if err == nil || d != nil {
					t.Errorf("%s, %s of %d requests: %v, %v; want nil and an error", name, op, len(reqs), d, err)
				}
			}
		}
		if n := doInt(t, srv, "EXISTS", rkredis.RedisKey(l, good)); n != 0 {
			t.Errorf("%s: the good bucket was written by a failed call", name)
		}
	}
}

// TestNoScriptReload: after SCRIPT FLUSH (or on a new server) each script
// (the one for calls of one request, the general one) is loaded again by
// EVAL when a call first needs it, transparently.
func TestNoScriptReload(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Timeout: testTimeout})
	r := limiter.Request{Key: "k", Limit: lim(1, time.Minute, 4), Cost: 1}
	take(t, l, r)
	take(t, l, r, r)
	do(t, srv, "SCRIPT", "FLUSH")
	if d := take(t, l, r)[0]; !d.Allowed || d.Remaining != 0 {
		t.Errorf("take of one request after SCRIPT FLUSH: %+v", d)
	}
	cachedScripts(t, srv, rkredis.OneScriptSHA)
	do(t, srv, "SCRIPT", "FLUSH")
	if d := take(t, l, r, r); d[0].Allowed || d[1].Allowed || d[0].Remaining != 0 {
		t.Errorf("take of two requests after SCRIPT FLUSH: %+v", d)
	}
	cachedScripts(t, srv, rkredis.ScriptSHA)
}

// cachedScripts fails t unless the server's script cache holds exactly the
// scripts named by shas.
func cachedScripts(t *testing.T, srv *redistest.Server, shas ...string) {
	t.Helper()
	info := do(t, srv, "INFO", "memory")
	if want := fmt.Sprintf("number_of_cached_scripts:%d", len(shas)); !strings.Contains(info, want) {
		t.Fatalf("want %s: %s", want, info)
	}
	for _, sha := range shas {
		if got := do(t, srv, "SCRIPT", "EXISTS", sha); got != "1" {
			t.Errorf("script %s not loaded: SCRIPT EXISTS = %q", sha, got)
		}
	}
}

// Test16Connections: 16 goroutines, each with its own client (one
// connection) and its own Limiter, like 16 processes, race for a burst of
// 5 on the server's clock; exactly 5 are admitted, the rest rejected, and
// the final state is the one 5 charges leave. 100 repetitions.
func Test16Connections(t *testing.T) {
	srv := redistest.Start(t)
	const n = 16
	ls := make([]*rkredis.Limiter, n)
	for i := range ls {
		c := newClient(t, srv.Addr, func(o *goredis.Options) { o.PoolSize, o.MinIdleConns = 1, 1 })
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		ls[i] = mustNew(t, c, rkredis.Options{Timeout: testTimeout})
	}
	li := lim(1, time.Minute, 5)
	reps := 100
	if testing.Short() {
		reps = 20
	}
	for rep := range reps {
		r := limiter.Request{Key: fmt.Sprintf("hot-%d", rep), Limit: li, Cost: 1}
		results := make([]limiter.Decision, n)
		errs := make([]error, n)
		race(n, func(g int) {
			d, err := ls[g].Take(context.Background(), nil, []limiter.Request{r})
			if err == nil {
				results[g] = d[0]
			}
			errs[g] = err
		})
		admitted := 0
		remaining := map[int64]int{}
		for g := range n {
			if errs[g] != nil {
				t.Fatalf("rep %d: %v", rep, errs[g])
			}
			if results[g].Allowed {
				admitted++
				remaining[results[g].Remaining]++
			} else if results[g].Remaining != 0 || results[g].RetryAfter <= 0 || results[g].RetryAfter > time.Minute {
				t.Fatalf("rep %d: rejection %+v", rep, results[g])
			}
		}
		if admitted != 5 {
			t.Fatalf("rep %d: %d admitted; want 5", rep, admitted)
		}
		for rem := range int64(5) { // each admitted request saw a distinct state
			if remaining[rem] != 1 {
				t.Fatalf("rep %d: admitted requests report remaining %v; want 0..4 once each", rep, remaining)
			}
		}
		d := peek(t, ls[0], r)[0]
		if d.Allowed || d.Remaining != 0 || d.ResetAfter > 5*time.Minute || d.ResetAfter < 5*time.Minute-5*time.Second {
			t.Fatalf("rep %d: final state %+v; want an empty bucket 5 minutes from full", rep, d)
		}
		if p := doInt(t, srv, "PTTL", rkredis.RedisKey(ls[0], r)); p > 300_001 || p < 295_000 {
			t.Fatalf("rep %d: PTTL %d; want about 5 minutes", rep, p)
		}
	}
}

// race starts n goroutines that each run f(g) once, released together.
func race(n int, f func(g int)) {
	start := make(chan struct{})
	done := make(chan struct{}, n)
	for g := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			f(g)
		}()
	}
	close(start)
	for range n {
		<-done
	}
}
