package adaptive

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// MaxCeiling is the largest ceiling a cap takes: its limit, the slots
// held and the critical ones among them share one 64-bit word, 20 bits
// each.
const MaxCeiling = 1_000_000

// Settings are a cap's bounds and its reserve, as its policy states them.
// A Cap takes them with each call, so that a reload changes them at once
// for every request that starts afterwards. Read-only once in use.
type Settings struct {
	// Min and Ceiling bound the limit: 1 <= Min <= Ceiling <= MaxCeiling.
	Min, Ceiling int64
	// Reserve is the share of the limit kept for critical requests, in
	// thousandths (200 is 20%), 0 to 999.
	Reserve int64
}

// Reserved returns the slots of limit kept for critical requests: Reserve
// thousandths of it, rounded to the nearest slot (halves up). A limit of 9
// with 20% keeps 2 (1.8); a limit of 2 keeps 0 (0.4).
func (s *Settings) Reserved(limit int64) int64 { return (limit*s.Reserve + 500) / 1000 }

// clamp returns limit within s's bounds: a cap's word holds 0 until its
// first update, which is Min.
func (s *Settings) clamp(limit int64) int64 { return min(max(limit, s.Min), s.Ceiling) }

// Cap is one adaptive in-flight cap: how many requests it lets run at once
// (its limit, which the latency of the requests it admits moves between a
// policy's bounds), how many run now, and how many of those are critical.
// New returns one; the zero value is usable too (its Now counts from the
// zero time: tests that script their clock use it). Safe for concurrent
// use: Acquire, Release and the limit's updates are compare-and-swap steps
// on one word, so no update can let an acquire pass the limit it saw.
type Cap struct {
	// word holds the limit, the slots held, the critical ones among them
	// and the probe flag (see word): an acquire compares and swaps them
	// at once, so it never admits past a limit that changed meanwhile.
	word atomic.Uint64
	_    [56]byte // keeps word alone on its cache line
	// peak and prevPeak are the most critical slots held at once in the
	// window under way and in the one before: what critical work needed
	// lately, which sheddable requests leave free.
	peak, prevPeak atomic.Int64
	// peakAt is when the peaks last rolled over (Now's nanoseconds): at a
	// window's close, or when a sheddable request found them stale (see
	// freshenPeaks), so that they age even when no window closes.
	peakAt atomic.Int64
	// every is how many releases there are per sample the controller
	// wants (see Sample): about maxSamples × 4 per window. 0 means 1.
	every atomic.Int64
	// mu guards ctl. Release only tries it: a sample that finds it taken
	// is dropped, so no request ever waits on the controller.
	mu  sync.Mutex
	ctl controller
	// baseline and latency are the estimates of the last window, in
	// nanoseconds (0 before the first), for readers outside mu.
	baseline, latency atomic.Int64
	epoch             time.Time // Now's origin
}

// New returns a cap whose limit is the Min of the Settings it is used
// with, until its first window closes.
func New() *Cap {
	c := &Cap{epoch: time.Now()}
	c.ctl.rng = uint64(c.epoch.UnixNano()) | 1 // probes of caps made apart drift apart
	return c
}

// Now returns the time since c was made, in nanoseconds of the monotonic
// clock (inside a testing/synctest bubble, of the bubble's clock): the
// start and now that Release takes.
func (c *Cap) Now() int64 { return int64(time.Since(c.epoch)) }

// Acquire takes a slot for a request, critical or sheddable, if its class
// may have one now (see admits), in one atomic step. It returns whether it
// did, the slots held after it (its own included when ok) and the limit it
// decided against. A slot taken must be given back with Release, exactly
// once, with the same class.
func (c *Cap) Acquire(s *Settings, critical bool) (ok bool, held, limit int64) {
	for {
		w := word(c.word.Load())
		lim := s.clamp(w.limit())
		if !c.admits(s, w, lim, critical) {
			if !critical && c.freshenPeaks() {
				continue // the peaks were stale: decide again
			}
			return false, w.held(), lim
		}
		if afterRead != nil {
			afterRead()
		}
		next := w + oneHeld
		if critical {
			next += oneCrit
		}
		if c.word.CompareAndSwap(uint64(w), uint64(next)) {
			if critical && next.critical() > c.peak.Load() {
				c.peak.Store(next.critical()) // a racy max: a statistic
			}
			return true, next.held(), lim
		}
	}
}

// admits reports whether a request of the class may take a slot in state
// w, the limit being lim:
//
//   - a critical one while fewer than the limit are held;
//   - a sheddable one while its class holds fewer than the limit, less
//     the reserve, less the slots critical work needed lately (the most
//     it held at once in this window or the last, or now if more); during
//     a probe window (see controller.probe), half the limit less those.
//
// So sheddable work is refused first, a critical request finds the
// reserve free beyond what critical work used lately, and is refused only
// when the whole limit is held.
func (c *Cap) admits(s *Settings, w word, lim int64, critical bool) bool {
	if w.held() >= lim {
		return false
	}
	if critical {
		return true
	}
	base := lim
	if w.probing() {
		base = max(lim/2, 1)
	}
	crit := max(w.critical(), c.peak.Load(), c.prevPeak.Load())
	return w.held()-w.critical()+s.Reserved(lim)+crit < base
}

// Sample reports whether the request about to run should be timed, its
// latency offered to the controller at Release: every request while they
// are few, one in n at random when a window sees more than the
// controller keeps (about 4 × maxSamples per window), so that a busy cap
// reads the clock, and tries the controller's lock, for a few hundred
// requests per window, not for all of them.
func (c *Cap) Sample() bool {
	n := c.every.Load()
	return n <= 1 || rand.Int64N(n) == 0
}

// afterRead, when a test sets it, runs in Acquire between deciding on the
// word it read and swapping it: where a limit update or another acquire
// may come in between (TestInterleavings).
var afterRead func()

// Peek returns what Acquire would decide now, taking nothing: whether a
// request of the class would be admitted, the slots held now, and the
// limit.
func (c *Cap) Peek(s *Settings, critical bool) (ok bool, held, limit int64) {
	w := word(c.word.Load())
	lim := s.clamp(w.limit())
	ok = c.admits(s, w, lim, critical)
	if !ok && !critical && c.freshenPeaks() {
		w = word(c.word.Load())
		lim = s.clamp(w.limit())
		ok = c.admits(s, w, lim, critical)
	}
	return ok, w.held(), lim
}

// Limit returns the cap's limit now, within s's bounds.
func (c *Cap) Limit(s *Settings) int64 {
	return s.clamp(word(c.word.Load()).limit())
}

// Estimates returns the baseline and the latency (the median) of the last
// window that closed; 0 and 0 before the first.
func (c *Cap) Estimates() (baseline, latency time.Duration) {
	return time.Duration(c.baseline.Load()), time.Duration(c.latency.Load())
}

// Release gives back a slot Acquire took for a request of the class. With
// sample true, the request ran from start to now (nanoseconds of Now) and
// its latency is a sample for the controller, unless another release holds
// the controller at that instant (the sample is then dropped: samples are
// a statistic, and no request waits for one). When the sample closes a
// window, Release returns the window's Update and true.
func (c *Cap) Release(s *Settings, critical, sample bool, start, now int64) (Update, bool) {
	d := uint64(oneHeld)
	if critical {
		d += oneCrit
	}
	w := word(c.word.Add(-d)) // the limit bits are untouched
	if !sample || !c.mu.TryLock() {
		return Update{}, false
	}
	u, ok := c.ctl.observe(c, s, start, now, w.held()+1)
	c.mu.Unlock()
	return u, ok
}

// setLimit makes limit the cap's limit, with the probe flag on or off,
// keeping the slots held: one compare-and-swap of the whole word, so an
// Acquire sees either the old state or the new one with the true counts,
// never a mix.
func (c *Cap) setLimit(limit int64, probe bool) {
	for {
		w := word(c.word.Load())
		if c.word.CompareAndSwap(uint64(w), uint64(w.with(limit, probe))) {
			return
		}
	}
}

// endWindow starts a new window of the critical peak: the one under way
// becomes the previous one.
func (c *Cap) endWindow() {
	c.peakAt.Store(c.Now())
	c.prevPeak.Store(c.peak.Load())
	c.peak.Store(word(c.word.Load()).critical())
}

// peaksAge is how long the critical peaks count without a window closing:
// two windows' worth (a window is about four medians long), 1 s before
// the first window closes, never under 10 ms.
func (c *Cap) peaksAge() int64 {
	lat := c.latency.Load()
	if lat == 0 {
		return int64(time.Second)
	}
	return max(8*lat, int64(10*time.Millisecond))
}

// freshenPeaks forgets critical peaks older than peaksAge (both become
// the critical slots held now) and reports whether it did. Windows close
// only as timed requests end; when the critical work stops and sheddable
// work is refused, none does, and without this a burst of critical
// requests long gone would keep every sheddable one out.
func (c *Cap) freshenPeaks() bool {
	if c.peak.Load() == 0 && c.prevPeak.Load() == 0 {
		return false
	}
	now, at := c.Now(), c.peakAt.Load()
	if now-at < c.peaksAge() || !c.peakAt.CompareAndSwap(at, now) {
		return false
	}
	crit := word(c.word.Load()).critical()
	c.prevPeak.Store(crit)
	c.peak.Store(crit)
	return true
}

// word is a Cap's state: held slots in bits 0-19, the critical ones among
// them in bits 20-39, the limit in bits 40-59 (0 until the first update)
// and the probe flag in bit 60.
type word uint64

const (
	fieldBits = 20
	fieldMask = 1<<fieldBits - 1
	oneHeld   = 1
	oneCrit   = 1 << fieldBits
	limitAt   = 2 * fieldBits
	probeBit  = 1 << (3 * fieldBits)
)

func (w word) held() int64     { return int64(w & fieldMask) }
func (w word) critical() int64 { return int64(w >> fieldBits & fieldMask) }
func (w word) limit() int64    { return int64(w >> limitAt & fieldMask) }
func (w word) probing() bool   { return w&probeBit != 0 }

// with returns w with the limit and the probe flag replaced.
func (w word) with(limit int64, probe bool) word {
	w = w&(1<<limitAt-1) | word(limit)<<limitAt
	if probe {
		w |= probeBit
	}
	return w
}
