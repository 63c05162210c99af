package redis

import (
	"math/bits"
	"sync"
	"time"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// The deny cache: after Redis rejects a bucket, the process knows a lower
// bound of the bucket's TAT (the local time the call was sent plus the
// debt Redis decided against), and answers the bucket's one-request calls
// locally while that bound still rejects them; see the package
// documentation ("The deny cache").

// defaultDenyCache is the number of deny cache entries when
// Options.DenyCache is 0.
const defaultDenyCache = 4096

// denyWays is the number of entries of one set of the cache.
const denyWays = 2

// denyEntry is what the cache knows of one bucket.
type denyEntry struct {
	key      string // the request's Key ("" for a free entry)
	interval int64  // the bucket's shape: emission interval (ns) and burst
	burst    int64
	// tat is a lower bound of the bucket's TAT on the local clock (ns
	// since the Limiter's epoch): the time the call was sent plus the debt
	// the script reported (plus the charge, for an admitted Take).
	tat int64
	// late is the same bound counted from when the reply was received:
	// Redis decided before then, so a probe sent once late admits is not
	// early (unless another process charged the bucket).
	late int64
	// probe is non-nil while one call of the bucket is in flight to Redis
	// because tat no longer rejects (the probe); other calls of the bucket
	// wait for it to close (for at most half their time: see
	// Limiter.waitProbe). probeEnd is when the probe is given up on.
	probe    chan struct{}
	probeEnd int64
}

// denySet is one set of the cache, under its own lock.
type denySet struct {
	mu sync.Mutex
	e  [denyWays]denyEntry
}

// denyCache is a fixed-size set-associative table of denyEntry, indexed by
// a hash of the request's Key and shape. It never grows: an insertion
// replaces the entry of its set whose bound expired first.
type denyCache struct {
	sets     []denySet
	mask     uint64
	probeFor int64 // how long a probe may stay in flight (ns): the Timeout
	// now is the local clock (Limiter.localNow), read by check under the
	// set's lock.
	now func() int64
}

func newDenyCache(entries int, probeFor time.Duration, now func() int64) *denyCache {
	n := max(1, (entries+denyWays-1)/denyWays)
	n = 1 << bits.Len(uint(n-1)) // a power of two, >= entries/denyWays
	return &denyCache{sets: make([]denySet, n), mask: uint64(n - 1), probeFor: int64(probeFor), now: now}
}

// set returns the set of r's bucket.
func (c *denyCache) set(r *limiter.Request) *denySet {
	h := uint64(keyHash(r.Key))
	h ^= uint64(r.Limit.Rate.Interval())*0x9e3779b97f4a7c15 ^ uint64(r.Limit.Burst)*0xbf58476d1ce4e5b9
	h ^= h >> 29
	return &c.sets[h&c.mask]
}

func (e *denyEntry) is(r *limiter.Request) bool {
	return e.key == r.Key && e.interval == int64(r.Limit.Rate.Interval()) && e.burst == r.Limit.Burst && e.key != ""
}

// Verdicts of denyCache.check.
const (
	denyMiss  = iota // ask Redis; nothing to report back
	denyHit          // answered locally: d is the rejection
	denyProbe        // ask Redis as the bucket's probe; report with done
	denyWait         // a probe is in flight: wait on the channel (at most half the caller's time), then check again
)

// check looks r's bucket up at the local time it reads while it holds the
// set's lock (a time read before could precede a reply recorded meanwhile,
// whose bound holds a charge Redis made after that time: deciding at that
// time rejected, with a RetryAfter up to one charge too long, requests the
// bucket could admit; a caller descheduled between the two saw 109 ms of
// debt on a 100 ms window). denyHit: d is the Decision
// (Cached) Redis would at least return; denyWait: wait for ch to close;
// denyProbe: the caller must call done when its call ends, and send its
// call d.RetryAfter from now (0 or, while the bound counted from the last
// reply's arrival still rejects, at most that reply's round trip: a probe
// sent as soon as the send-time bound admits reached Redis too early about
// as often as not, and was rejected: one more call per interval). It does
// not allocate, except to make the probe's channel.
func (c *denyCache) check(r *limiter.Request) (d limiter.Decision, verdict int, ch chan struct{}) {
	s := c.set(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := c.now()
	for i := range s.e {
		e := &s.e[i]
		if !e.is(r) {
			continue
		}
		if e.tat <= now {
			return d, denyMiss, nil // the bucket is full again: nothing to know
		}
		d, _ = gcra.Decide(e.tat, now, r.Limit, r.Cost)
		if !d.Allowed && !d.Never {
			d.Cached = true
			return d, denyHit, nil
		}
		if e.probe != nil && now < e.probeEnd {
			return limiter.Decision{}, denyWait, e.probe
		}
		if e.probe != nil {
			close(e.probe) // a probe given up on: its waiters check again
		}
		e.probe, e.probeEnd = make(chan struct{}), now+c.probeFor
		var wait limiter.Decision
		if e.late > e.tat {
			if w, _ := gcra.Decide(e.late, now, r.Limit, r.Cost); !w.Allowed && !w.Never {
				wait.RetryAfter = min(w.RetryAfter, time.Duration(e.late-e.tat))
			}
		}
		return wait, denyProbe, e.probe
	}
	return d, denyMiss, nil
}

// done records what Redis said of r's bucket, a call of r alone sent at
// local time sent and answered at recv: dec, decided against debt ns,
// charged (a Take that charged) or not, or an error (dec and debt unused). probe is the channel
// check returned with denyProbe, or nil. A rejection (not Never) creates
// or refreshes the bucket's entry; any other answer refreshes an existing
// one only.
func (c *denyCache) done(r *limiter.Request, sent, recv int64, dec *limiter.Decision, debt int64, charged bool, err error, probe chan struct{}) {
	s := c.set(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	var e *denyEntry
	for i := range s.e {
		if s.e[i].is(r) {
			e = &s.e[i]
			break
		}
	}
	if e != nil && probe != nil && e.probe == probe {
		close(e.probe)
		e.probe = nil
	}
	if err != nil || dec.Never {
		return
	}
	tat, late := sent+debt, recv+debt
	if charged {
		tat += r.Cost * int64(r.Limit.Rate.Interval())
		late += r.Cost * int64(r.Limit.Rate.Interval())
	}
	if e == nil {
		if dec.Allowed {
			return
		}
		// Replace the free entry, or the one whose bound ran out first,
		// unless it is a bucket in debt with a probe in flight.
		for i := range s.e {
			if e == nil || s.e[i].tat < e.tat {
				e = &s.e[i]
			}
		}
		if e.probe != nil {
			close(e.probe)
		}
		*e = denyEntry{key: r.Key, interval: int64(r.Limit.Rate.Interval()), burst: r.Limit.Burst}
	}
	// Never lower a bound another reply raised: replies can arrive out of
	// order, and each is a lower bound.
	e.tat = max(e.tat, tat)
	e.late = max(e.late, late)
}

// settled moves the bound of r's bucket, if the cache has it, by x ns,
// the change a settle made (see Limiter.Settle). A refund (x < 0) lowers
// it whether the settle landed or not (it gave back at most -x), so the
// bound stays a lower bound of the bucket's TAT. A debt (x > 0) raises it
// only when the settle is known to have landed (applied true): the TAT
// then moved by x at least (from now, if the bucket was full), so a
// cached rejection answers with the Retry-After of the debt, not of the
// bucket before it.
func (c *denyCache) settled(r *limiter.Request, x int64, applied bool) {
	if x > 0 && !applied {
		return
	}
	s := c.set(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.e {
		if e := &s.e[i]; e.is(r) {
			e.tat += x
			e.late += x
		}
	}
}

// abandon is done for a probe whose caller stopped waiting for it (its
// context ended): the entry is left as it was, and the next call of the
// bucket may probe.
func (c *denyCache) abandon(r *limiter.Request, probe chan struct{}) {
	c.done(r, 0, 0, nil, 0, false, errAbandoned, probe)
}

// errAbandoned marks an abandoned probe in denyCache.done.
var errAbandoned = &abandonedError{}

type abandonedError struct{}

func (*abandonedError) Error() string { return "probe abandoned" }

// localNow returns the local clock the deny cache uses: ns since the
// Limiter's epoch on the monotonic clock, or the test clock.
func (l *Limiter) localNow() int64 {
	if l.now != nil {
		return int64(l.now())
	}
	return int64(time.Since(l.epoch))
}
