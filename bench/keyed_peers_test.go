package bench

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulimiter "github.com/ulule/limiter/v3"
	umemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
)

// rateBurst is one policy's limit, the same for every limiter: Rate tokens
// per Per (0 means per second), capacity Burst (x/time/rate's and
// ratekey's meaning of burst; throttled gets MaxBurst = Burst-1, which is
// the same bucket).
type rateBurst struct {
	Rate  int
	Burst int
	Per   time.Duration
}

func (l rateBurst) per() time.Duration {
	if l.Per == 0 {
		return time.Second
	}
	return l.Per
}

// perSecond is the rate in tokens per second (x/time/rate's unit).
func (l rateBurst) perSecond() float64 { return float64(l.Rate) / l.per().Seconds() }

// window is Burst/Rate: the time a bucket takes to refill from empty, used
// as the window of the fixed- and sliding-window limiters (ulule, httprate)
// and the refill interval of go-limiter, which then all admit Burst
// requests per window, the same long-run rate.
func (l rateBurst) window() time.Duration {
	return time.Duration(l.Burst) * l.per() / time.Duration(l.Rate)
}

// The three policies of the keyed workloads.
var (
	accountLimit = rateBurst{Rate: 100, Burst: 50}
	tenantLimit  = rateBurst{Rate: 10_000, Burst: 1_000}
	opLimit      = rateBurst{Rate: 1_000_000, Burst: 100_000}
)

// keyedLimiter is one in-memory keyed limiter under test. worker returns a
// per-goroutine decision function for one request with the given number of
// policies (1: account; 3: account, tenant, operation), reporting whether
// the request is admitted.
type keyedLimiter interface {
	worker(policies int) func(account, tenant string) bool
	close()
}

// peerLimiter adapts the peers, which have one limiter per rate: three
// separate limiters, consulted in order, stopping at the first rejection
// (what a chain of per-policy middlewares does; no all-or-nothing: an
// earlier policy stays charged when a later one rejects).
type peerLimiter struct {
	acct, ten, op func(key string) bool
	closers       []func()
}

func (p *peerLimiter) worker(policies int) func(string, string) bool {
	if policies == 1 {
		return func(a, _ string) bool { return p.acct(a) }
	}
	return func(a, t string) bool { return p.acct(a) && p.ten(t) && p.op(opKey) }
}

func (p *peerLimiter) close() {
	for _, c := range p.closers {
		c()
	}
}

func newPeer(mk func(rateBurst) (func(string) bool, func())) *peerLimiter {
	p := &peerLimiter{}
	var c [3]func()
	p.acct, c[0] = mk(accountLimit)
	p.ten, c[1] = mk(tenantLimit)
	p.op, c[2] = mk(opLimit)
	for _, f := range c {
		if f != nil {
			p.closers = append(p.closers, f)
		}
	}
	return p
}

// ratekeyKeyed is limiter/memory with its defaults (MaxKeys 1M, the
// monotonic clock): every policy of a request in one Take, all-or-nothing.
type ratekeyKeyed struct{ l *memory.Limiter }

func newRatekeyKeyed() keyedLimiter { return &ratekeyKeyed{l: memory.New(memory.Options{})} }

func rkLimit(l rateBurst) limiter.Limit {
	return limiter.Limit{Rate: limiter.Rate{Count: int64(l.Rate), Per: l.per()}, Burst: int64(l.Burst)}
}

func (r *ratekeyKeyed) worker(policies int) func(string, string) bool {
	acct, ten, op := rkLimit(accountLimit), rkLimit(tenantLimit), rkLimit(opLimit)
	reqs := make([]limiter.Request, policies)
	buf := make([]limiter.Decision, 0, policies)
	ctx := context.Background()
	return func(a, t string) bool {
		reqs[0] = limiter.Request{Key: a, Limit: acct, Cost: 1}
		if policies == 3 {
			reqs[1] = limiter.Request{Key: t, Limit: ten, Cost: 1}
			reqs[2] = limiter.Request{Key: opKey, Limit: op, Cost: 1}
		}
		d, err := r.l.Take(ctx, buf[:0], reqs)
		if err != nil {
			panic(err)
		}
		for i := range d {
			if !d[i].Allowed {
				return false
			}
		}
		return true
	}
}

func (r *ratekeyKeyed) close() {}

// xtimeMap: golang.org/x/time/rate, one *rate.Limiter per key in a map
// guarded by one mutex, created on first use (never evicted).
func newXtimeMutex() keyedLimiter {
	return newPeer(func(l rateBurst) (func(string) bool, func()) {
		var mu sync.Mutex
		m := make(map[string]*rate.Limiter)
		r := rate.Limit(l.perSecond())
		return func(key string) bool {
			mu.Lock()
			lim := m[key]
			if lim == nil {
				lim = rate.NewLimiter(r, l.Burst)
				m[key] = lim
			}
			mu.Unlock()
			return lim.Allow()
		}, nil
	})
}

// xtimeSharded: the same in 256 shards (as many as ratekey's store has at
// 1M keys), each a map under a RWMutex: a read lock to find a tracked key,
// the write lock only to insert a new one.
func newXtimeSharded() keyedLimiter {
	return newPeer(func(l rateBurst) (func(string) bool, func()) {
		type shard struct {
			mu sync.RWMutex
			m  map[string]*rate.Limiter
			_  [32]byte // keep neighbouring shards' locks off one cache line
		}
		shards := make([]shard, 256)
		for i := range shards {
			shards[i].m = make(map[string]*rate.Limiter)
		}
		seed := maphash.MakeSeed()
		r := rate.Limit(l.perSecond())
		return func(key string) bool {
			s := &shards[maphash.String(seed, key)&255]
			s.mu.RLock()
			lim := s.m[key]
			s.mu.RUnlock()
			if lim == nil {
				s.mu.Lock()
				if lim = s.m[key]; lim == nil {
					lim = rate.NewLimiter(r, l.Burst)
					s.m[key] = lim
				}
				s.mu.Unlock()
			}
			return lim.Allow()
		}, nil
	})
}

// throttled/v2 GCRA over its memstore with maxKeys 0 (a plain map under a
// RWMutex, values updated by compare-and-swap; unbounded). With maxKeys > 0
// it uses an LRU under one lock, which is slower.
func newThrottled() keyedLimiter {
	return newPeer(func(l rateBurst) (func(string) bool, func()) {
		st, err := memstore.NewCtx(0)
		if err != nil {
			panic(err)
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(l.Rate, l.per()), MaxBurst: l.Burst - 1})
		if err != nil {
			panic(err)
		}
		ctx := context.Background()
		return func(key string) bool {
			limited, _, err := rl.RateLimitCtx(ctx, key, 1)
			return err == nil && !limited
		}, nil
	})
}

// sethvargo/go-limiter memorystore: Burst tokens per window, refilled at
// interval ticks; map under a RWMutex with a per-bucket mutex; swept by a
// background goroutine (defaults: every 6 h, keys idle for 12 h).
func newGoLimiter() keyedLimiter {
	return newPeer(func(l rateBurst) (func(string) bool, func()) {
		st, err := memorystore.New(&memorystore.Config{Tokens: uint64(l.Burst), Interval: l.window()})
		if err != nil {
			panic(err)
		}
		ctx := context.Background()
		return func(key string) bool {
			_, _, _, ok, err := st.Take(ctx, key)
			return err == nil && ok
		}, func() { _ = st.Close(ctx) }
	})
}

// ulule/limiter v3 memory store: a fixed window of Burst requests per
// window; every call increments the counter (rejected ones included); keys
// carry the store prefix ("limiter:" + key, a new string per call); expired
// entries are cleaned every 30 s (the default).
func newUlule() keyedLimiter {
	return newPeer(func(l rateBurst) (func(string) bool, func()) {
		lim := ulimiter.New(umemory.NewStore(), ulimiter.Rate{Period: l.window(), Limit: int64(l.Burst)})
		ctx := context.Background()
		return func(key string) bool {
			c, err := lim.Get(ctx, key)
			return err == nil && !c.Reached
		}, nil
	})
}

// go-chi/httprate's sliding-window decision over its local LimitCounter
// (NewLocalLimitCounter: two map[uint64]int of xxh3 key hashes, the previous
// and the current window), exactly as httprate.RateLimiter.OnLimit makes it
// (one limiter-wide mutex around Get and IncrementBy, weighted previous
// window) minus the response headers OnLimit writes. Limit Burst per window.
func newHttprate() keyedLimiter {
	return newPeer(func(l rateBurst) (func(string) bool, func()) {
		w := l.window()
		var c httprate.LimitCounter = httprate.NewLocalLimitCounter(w)
		c.Config(l.Burst, w)
		var mu sync.Mutex
		return func(key string) bool {
			now := time.Now().UTC()
			cur := now.Truncate(w)
			prev := cur.Add(-w)
			mu.Lock()
			cc, pc, err := c.Get(key, cur, prev)
			if err != nil {
				mu.Unlock()
				return false
			}
			est := float64(pc)*(float64(w)-float64(now.Sub(cur)))/float64(w) + float64(cc)
			if int(math.Round(est))+1 > l.Burst {
				mu.Unlock()
				return false
			}
			err = c.IncrementBy(key, cur, 1)
			mu.Unlock()
			return err == nil
		}, nil
	})
}

// keyedPeers lists ratekey first, then the peers, by the names used in
// metric units.
var keyedPeers = []struct {
	name string
	new  func() keyedLimiter
}{
	{"ratekey", newRatekeyKeyed},
	{"xtime-mutex", newXtimeMutex},
	{"xtime-sharded", newXtimeSharded},
	{"throttled", newThrottled},
	{"go-limiter", newGoLimiter},
	{"ulule", newUlule},
	{"httprate", newHttprate},
}
