package engine

import (
	"context"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ratekey/ratekey/decide"
)

// Bounded decision logging (see [Config.LogEveryDecision]).
//
// An attacker who can be rejected at will must not be able to fill the
// operator's disk, so by default the decisions a client can trigger at will
// (every one logged at Info or above: REJECTED, REJECTED_DRY_RUN, DELAYED,
// DELAYED_DRY_RUN, ERROR) are logged per interval, not per request:
//
//   - the first decision of a (policy, decision, key) in the interval gets
//     its usual "ratekey decision" line, for at most logKeysPerInterval
//     such triples per interval;
//   - the further decisions of a triple that got a line are counted, and one
//     "ratekey decisions summarised" line per triple gives the count when the
//     interval ends;
//   - the decisions of every other triple are counted per (policy,
//     decision), and one "ratekey decisions suppressed" line per pair gives
//     the count and how many distinct keys they came from.
//
// The first lines (one decision each) plus the counts of both kinds of
// summary add up exactly to the decisions logged at the logger's level;
// the metrics count every decision independently of all this.
//
// Memory is bounded whatever the key cardinality: logKeysPerInterval
// entries (each holding a copy of its key), a set of at most
// logDistinctKeys 64-bit hashes for counting distinct keys, and one
// aggregate per (policy, decision) of the configuration.

const (
	// defaultLogInterval is the decision log's interval when
	// [Config.LogInterval] is 0.
	defaultLogInterval = time.Second

	// logKeysPerInterval caps the (policy, decision, key) triples logged
	// individually per interval. Each costs at most two lines (its first
	// decision, then its summary): about 10 × (300 + 250) bytes, 5.5 KB per
	// interval in JSON, plus one suppressed line (about 250 bytes) per
	// (policy, decision) pair; so a flood over any number of keys writes
	// some 6 KB a second at the default interval with one policy, where a
	// line per rejection writes 300 bytes per rejection.
	logKeysPerInterval = 10

	// logDistinctKeys caps the key hashes kept per interval to count the
	// distinct keys of the suppressed decisions (8 bytes each, some 64 KB
	// of map in all). Beyond it, the count is a lower bound, and the line
	// says so with keys_capped: true.
	logDistinctKeys = 4096
)

// logKey names what a first line and a per-key summary cover.
type logKey struct {
	policy   string
	decision decide.Decision
	key      string
}

// logEntry is one triple logged individually in the interval: count is the
// decisions after its first line.
type logEntry struct {
	logKey
	count int64
	level slog.Level
}

// aggKey names a suppressed line.
type aggKey struct {
	policy   string
	decision decide.Decision
}

// logAggregate counts the suppressed decisions of one (policy, decision)
// in the interval, and their distinct keys (a lower bound when capped).
type logAggregate struct {
	count, keys int64
	capped      bool
	level       slog.Level
}

// logSummary is one summary line to write.
type logSummary struct {
	logKey
	suppressed bool // a "ratekey decisions suppressed" line, keys holds the key count
	count      int64
	keys       int64
	capped     bool
	level      slog.Level
	start      time.Time
	interval   time.Duration
}

// LogSampler decides which decisions get a line, and writes the summaries.
// One per rate limiter, shared by its configurations across reloads
// (State.Logs). Safe for
// concurrent use; a single mutex, taken only for decisions it samples.
//
// An interval starts at the first sampled decision and lasts the interval
// configured then. It ends lazily: at the first sampled decision after it,
// at Flush, or, once a decision has been counted in it, at
// a one-shot timer set for its end (no goroutine outlives it: the timer is
// set again only while there are counts to write).
type LogSampler struct {
	now   func() time.Time            // time.Now; tests inject a clock
	after func(time.Duration, func()) // time.AfterFunc; tests inject their own

	mu       sync.Mutex
	logger   *slog.Logger // of the configuration that sampled last
	open     bool         // an interval is under way
	start    time.Time
	deadline time.Time
	interval time.Duration
	armed    bool // a timer will end the interval
	pending  bool // the interval has counts to write
	ents     []logEntry
	aggs     map[aggKey]*logAggregate // kept across intervals; reset to zero
	seen     map[uint64]struct{}      // hashes of the suppressed keys in the interval
	seed     maphash.Seed
}

func NewLogSampler() *LogSampler {
	return &LogSampler{
		now:   time.Now,
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		ents:  make([]logEntry, 0, logKeysPerInterval),
		aggs:  map[aggKey]*logAggregate{},
		seen:  map[uint64]struct{}{},
		seed:  maphash.MakeSeed(),
	}
}

// logLine reports whether res's decision, at level, gets its own line. It
// is called once the logger is known to write level. PASSED (sampled by
// SamplePassed) and SKIPPED (at Debug) always do, as does everything with
// LogEveryDecision.
func (st *State[R]) logLine(res *decide.PolicyResult, level slog.Level) bool {
	if st.LogEveryDecision || st.Logs == nil || res.Decision == decide.DecisionPassed || res.Decision == decide.DecisionSkipped {
		return true
	}
	return st.Logs.sample(st.Logger, st.LogInterval, res, level)
}

// sample counts one decision and reports whether it gets its own line;
// it writes the summaries of the interval it ends, if any, on logger.
func (s *LogSampler) sample(logger *slog.Logger, interval time.Duration, res *decide.PolicyResult, level slog.Level) bool {
	now := s.now()
	var done []logSummary
	s.mu.Lock()
	s.logger = logger
	if s.open && !now.Before(s.deadline) {
		done = s.end()
	}
	if !s.open {
		s.open, s.start, s.interval, s.deadline = true, now, interval, now.Add(interval)
	}
	line := s.count(res, level)
	arm := !line && !s.armed
	if arm {
		s.armed = true
	}
	wait := s.deadline.Sub(now)
	s.mu.Unlock()
	if arm {
		s.after(wait, s.expire)
	}
	writeSummaries(logger, done)
	return line
}

// count records one decision in the interval under way and reports
// whether it gets its own line. s.mu is held.
func (s *LogSampler) count(res *decide.PolicyResult, level slog.Level) bool {
	for i := range s.ents {
		e := &s.ents[i]
		if e.key == res.Key && e.policy == res.Policy && e.decision == res.Decision {
			e.count++
			e.level = max(e.level, level)
			s.pending = true
			return false
		}
	}
	if len(s.ents) < logKeysPerInterval {
		// The key lives in the request's pooled memory: keep a copy.
		s.ents = append(s.ents, logEntry{logKey: logKey{res.Policy, res.Decision, strings.Clone(res.Key)}, level: level})
		return true
	}
	s.pending = true
	ak := aggKey{res.Policy, res.Decision}
	a := s.aggs[ak]
	if a == nil {
		a = &logAggregate{}
		s.aggs[ak] = a
	}
	if a.count == 0 {
		a.level = level
	}
	a.count++
	a.level = max(a.level, level)
	if !a.capped {
		var h maphash.Hash
		h.SetSeed(s.seed)
		h.WriteString(res.Policy)
		h.WriteByte(0)
		h.WriteString(string(res.Decision))
		h.WriteByte(0)
		h.WriteString(res.Key)
		sum := h.Sum64()
		if _, ok := s.seen[sum]; !ok {
			if len(s.seen) < logDistinctKeys {
				s.seen[sum] = struct{}{}
				a.keys++
			} else {
				a.capped = true
			}
		}
	}
	return false
}

// end closes the interval under way and returns its summaries. s.mu is held.
func (s *LogSampler) end() []logSummary {
	var out []logSummary
	if s.pending {
		for i := range s.ents {
			if e := &s.ents[i]; e.count > 0 {
				out = append(out, logSummary{logKey: e.logKey, count: e.count, level: e.level, start: s.start, interval: s.interval})
			}
		}
		for k, a := range s.aggs {
			if a.count > 0 {
				out = append(out, logSummary{logKey: logKey{policy: k.policy, decision: k.decision}, suppressed: true,
					count: a.count, keys: a.keys, capped: a.capped, level: a.level, start: s.start, interval: s.interval})
				*a = logAggregate{}
			}
		}
	}
	clear(s.ents) // drop the key copies
	s.ents = s.ents[:0]
	clear(s.seen)
	s.open, s.pending = false, false
	return out
}

// expire is the timer set for the end of an interval with counts to write.
func (s *LogSampler) expire() {
	now := s.now()
	var done []logSummary
	s.mu.Lock()
	s.armed = false
	var wait time.Duration
	switch {
	case s.open && !now.Before(s.deadline):
		done = s.end()
	case s.open && s.pending:
		// A sampled decision ended the interval the timer was set for and
		// started another one, with counts of its own.
		s.armed, wait = true, s.deadline.Sub(now)
	}
	logger := s.logger
	s.mu.Unlock()
	if wait > 0 {
		s.after(wait, s.expire)
	}
	writeSummaries(logger, done)
}

// Flush ends the interval under way, writing its summaries now instead
// of when the interval ends (see middleware.RateLimiter.FlushLog). Safe
// for concurrent use.
func (s *LogSampler) Flush() {
	s.mu.Lock()
	var done []logSummary
	if s.open {
		done = s.end()
	}
	logger := s.logger
	s.mu.Unlock()
	writeSummaries(logger, done)
}

// writeSummaries writes the summary lines. Fields follow the decision lines' names;
// keys are secret-free by construction.
func writeSummaries(logger *slog.Logger, done []logSummary) {
	for i := range done {
		d := &done[i]
		attrs := []slog.Attr{
			slog.String("policy", d.policy),
			slog.String("decision", string(d.decision)),
		}
		msg := "ratekey decisions summarised"
		if d.suppressed {
			msg = "ratekey decisions suppressed"
			attrs = append(attrs, slog.Int64("count", d.count), slog.Int64("keys", d.keys))
			if d.capped {
				attrs = append(attrs, slog.Bool("keys_capped", true))
			}
		} else {
			attrs = append(attrs, slog.String("key", d.key), slog.Int64("count", d.count))
		}
		attrs = append(attrs, slog.Time("interval_start", d.start), slog.Float64("interval_seconds", d.interval.Seconds()))
		// Not the request's context: the line sums up many requests.
		logger.LogAttrs(context.Background(), d.level, msg, attrs...)
	}
}

// SetClock makes s read now instead of the real clock, and hand the
// timers that end its intervals to after (which may run them when it
// likes, or never) instead of time.AfterFunc: for tests of the "timer
// late" path, which a testing/synctest bubble cannot reach (it fires
// timers exactly on time). Call it before the first decision.
func (s *LogSampler) SetClock(now func() time.Time, after func(time.Duration, func())) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now, s.after = now, after
}

// Size returns what s holds, for tests of its bounds: entries logged
// individually, key hashes, and aggregates.
func (s *LogSampler) Size() (entries, hashes, aggregates int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ents), len(s.seen), len(s.aggs)
}
