package identity

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/internal/httpsonly"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/internal/redact"
)

// JWK Set defaults and bounds for [JWKSOptions].
const (
	// defaultJWKSTimeout bounds one JWK Set fetch (connect, headers and
	// body) when JWKSOptions.Timeout is zero.
	defaultJWKSTimeout = 10 * time.Second
	// defaultJWKSMaxBytes caps a JWK Set response body when
	// JWKSOptions.MaxBytes is zero (256 KiB; real sets are a few KiB).
	defaultJWKSMaxBytes = 256 << 10
	// defaultJWKSMaxKeys caps the number of JWKs in one set.
	defaultJWKSMaxKeys = 100
	// defaultJWKSRefresh is the background refresh interval of a JWK Set.
	defaultJWKSRefresh = time.Hour
	// defaultJWKSRetry is the delay before the next background attempt
	// after a failed fetch.
	defaultJWKSRetry = 30 * time.Second
	// defaultJWKSCooldown is the minimum time between two refreshes of one
	// issuer's set triggered by unknown kids (at most one per cooldown).
	defaultJWKSCooldown = 5 * time.Minute
	// defaultJWKSMissWait is the longest a request waits for a fetch it
	// needs (unknown kid, or nothing cached yet).
	defaultJWKSMissWait = time.Second
	// minJWKSInterval is the smallest accepted Refresh, Retry and Cooldown.
	minJWKSInterval = time.Second
)

// Why not keyfunc/v3, and how jwkset is used (checked against keyfunc
// v3.9.2 and jwkset v0.11.4):
//   - keyfunc.NewDefault* pools every URL into one storage, so one issuer's
//     key verifies another issuer's tokens; ratekey keeps one set per
//     issuer record.
//   - jwkset's unknown-kid refresh (HTTPClientOptions.RefreshUnknownKID)
//     calls rate.Limiter.Wait on the request path (up to RateLimitWaitMax,
//     one minute by default) and then fetches synchronously; its timing uses
//     the wall clock. Here a miss only signals the background loop and waits
//     at most MissWait, and the cooldown runs on JWTConfig.Now.
//   - jwkset decodes the response with json.NewDecoder(resp.Body) without
//     a size cap, and NewStorageFromHTTP fetches synchronously at
//     construction. Here the body is read through io.LimitReader(MaxBytes+1)
//     whatever http.Client is configured, and nothing is fetched before use.
//   - jwkset keeps the last good set when a refresh fails, as this does.
//
// So jwkset is used only to convert one JWK into a public key
// (NewJWKFromMarshal, Private false, x5u/x5c stripped first); fetching,
// caching, scheduling and the cooldown are this file's.

// ErrKeySourceUnavailable reports that a credential could not be checked
// because the source of its keys cannot be reached right now: a JWK Set
// never fetched successfully (nothing cached), an [IssuerResolver] or an
// [APIKeyStore] that failed. It is not a verdict on the credential: the
// HTTP answer is 503 (RFC 9110 §15.6.4), never 401, and never anonymous.
// Errors wrapping it carry no token bytes. Compare with errors.Is.
var ErrKeySourceUnavailable = errors.New("identity: key source unavailable")

// JWKSOptions configures how the JWK Sets of [IssuerRecord.JWKSURL] are
// fetched and cached. The zero value uses every default. Each issuer record
// gets its own key set, refresh schedule and unknown-kid cooldown; nothing
// is shared across issuers except the HTTP client.
//
// Behaviour (decided; tests pin each rule):
//
//   - Nothing is fetched at construction. A record's set is first fetched
//     when a token names its issuer or when [JWTAuthenticator.Ready] is
//     called; from then on a background goroutine refreshes it every
//     Refresh (or the record's JWKSRefresh), and Retry after a failure.
//
//   - A failed fetch (network error, non-200 status, body over MaxBytes,
//     invalid JSON, more than MaxKeys keys, duplicate kids, no usable key)
//     keeps the last good set, which is used for as long as refreshes fail,
//     and is reported to JWTConfig.Logger.
//
//   - A kid missing from the cached set triggers at most one refresh per
//     issuer per Cooldown, counted from the previous triggered refresh
//     whatever the cache holds (an empty cache does not reset it). A token
//     with a kid miss waits at most MissWait (and never past its context)
//     for that refresh, or for a fetch already in flight, then gets 401
//     invalid_token (unknown key id). A token arriving while nothing is
//     cached and no fetch can complete in MissWait gets
//     [ErrKeySourceUnavailable] (503).
//
//   - Tokens without kid use the set's key only if the set has exactly one
//     usable key.
//
//   - OnFetch, when set, is called after every fetch attempt with the
//     issuer and the attempt's error (nil on success), from the fetching
//     goroutine; it must be safe for concurrent use and must not block
//     (middleware.Metrics.JWKSFetch, which packages metrics and
//     otelmetrics implement, counts them).
type JWKSOptions struct {
	// Client is the HTTP client; nil means a client with Timeout as its
	// timeout that follows no redirects. Whatever the client, each fetch
	// is bounded by Timeout and its body by MaxBytes, and a set whose
	// last redirect led to plain http (but to a loopback host) is
	// refused, as such a JWKSURL is.
	Client *http.Client
	// Timeout bounds one fetch; zero means 10 seconds; at most 5 minutes.
	Timeout time.Duration
	// MaxBytes caps a response, in bytes; zero means 256 KiB (real sets
	// are a few KiB); between 1 KiB and 16 MiB.
	MaxBytes int64
	// MaxKeys caps the keys of a set; zero means 100.
	MaxKeys int
	// Refresh is the background refresh interval; zero means 1 hour; at
	// least 1 second; measured by a timer (the monotonic clock).
	Refresh time.Duration
	// Retry is the interval of refreshes after a failed fetch; zero means
	// 30 seconds; at least 1 second; measured by a timer.
	Retry time.Duration
	// Cooldown is the least time between two refreshes triggered by
	// unknown kids, per issuer; zero means 5 minutes; at least 1 second;
	// measured with JWTConfig.Now.
	Cooldown time.Duration
	// MissWait is the longest a token with an unknown kid waits for a
	// refresh; zero means 1 second; at most 30s. Measured in real time,
	// like Timeout (both bound request latency).
	MissWait time.Duration
	// OnFetch, when set, is called after every fetch attempt with the
	// issuer and the attempt's error (nil on success), from the fetching
	// goroutine; it must be safe for concurrent use and must not block
	// (middleware.Metrics.JWKSFetch, which packages metrics and otelmetrics
	// implement, counts them).
	OnFetch func(issuer string, err error)
}

// jwksOptions is JWKSOptions with defaults applied.
type jwksOptions struct {
	client                   *http.Client
	timeout                  time.Duration
	maxBytes                 int64
	maxKeys                  int
	refresh, retry, cooldown time.Duration
	missWait                 time.Duration
	onFetch                  func(issuer string, err error)
}

// resolve applies defaults and validates o.
func (o JWKSOptions) resolve() (jwksOptions, []error) {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("jwks."+format, args...))
	}
	def := func(v, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return v
	}
	r := jwksOptions{
		timeout:  def(o.Timeout, defaultJWKSTimeout),
		maxBytes: o.MaxBytes,
		maxKeys:  o.MaxKeys,
		refresh:  def(o.Refresh, defaultJWKSRefresh),
		retry:    def(o.Retry, defaultJWKSRetry),
		cooldown: def(o.Cooldown, defaultJWKSCooldown),
		missWait: def(o.MissWait, defaultJWKSMissWait),
		onFetch:  o.OnFetch,
	}
	if r.maxBytes == 0 {
		r.maxBytes = defaultJWKSMaxBytes
	}
	if r.maxKeys == 0 {
		r.maxKeys = defaultJWKSMaxKeys
	}
	if r.timeout < 0 || r.timeout > 5*time.Minute {
		fail("timeout: %v is outside (0, 5m]", r.timeout)
	}
	if r.maxBytes < 1<<10 || r.maxBytes > 16<<20 {
		fail("max_bytes: %d is outside [1 KiB, 16 MiB]", r.maxBytes)
	}
	if r.maxKeys < 1 {
		fail("max_keys: %d is below 1", r.maxKeys)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"refresh", r.refresh}, {"retry", r.retry}, {"cooldown", r.cooldown}} {
		if d.v < minJWKSInterval {
			fail("%s: %v is below %v", d.name, d.v, minJWKSInterval)
		}
	}
	if r.missWait < 0 || r.missWait > 30*time.Second {
		fail("miss_wait: %v is outside (0, 30s]", r.missWait)
	}
	r.client = o.Client
	if r.client == nil {
		r.client = defaultJWKSClient(r.timeout)
	}
	return r, errs
}

// keySnapshot is one successfully fetched JWK Set, immutable once stored.
type keySnapshot struct {
	byKID    map[string]boundKey
	unusable map[string]struct{} // kids present in the set but not usable here
	only     *boundKey           // the single usable key, for tokens without kid

	// gen numbers the distinct contents of the set (1 for the first
	// fetch). A refresh that returns the same keys keeps the number; any
	// difference (a kid added, removed or bound to another key or
	// algorithm) takes the next one. The verification cache records the
	// gen of the snapshot whose key verified a token and serves the entry
	// only while the set still has that gen.
	gen uint64
}

// sameKeys reports whether a and b hold the same kids, each bound to an
// equal key and the same algorithm, the same unusable kids and the same
// key for tokens without kid.
func sameKeys(a, b *keySnapshot) bool {
	if len(a.byKID) != len(b.byKID) || len(a.unusable) != len(b.unusable) {
		return false
	}
	for kid, ka := range a.byKID {
		kb, ok := b.byKID[kid]
		if !ok || !sameBoundKey(ka, kb) {
			return false
		}
	}
	for kid := range a.unusable {
		if _, ok := b.unusable[kid]; !ok {
			return false
		}
	}
	if (a.only == nil) != (b.only == nil) {
		return false
	}
	return a.only == nil || sameBoundKey(*a.only, *b.only)
}

// sameBoundKey compares two public keys of a JWK Set with their Equal
// methods (every type parseJWK returns has one) and their algorithms.
func sameBoundKey(a, b boundKey) bool {
	k, ok := a.key.(interface{ Equal(crypto.PublicKey) bool })
	return ok && a.alg == b.alg && k.Equal(b.key)
}

// jwksSet is the key set of one issuer record: the last good snapshot, the
// background refresher and the unknown-kid cooldown. Safe for concurrent
// use.
type jwksSet struct {
	issuer  string
	url     string
	shown   string // the URL without user information or query, for logs
	refresh time.Duration
	algs    []string // the record's algorithms, in configuration order
	env     *jwtEnv

	snap     atomic.Pointer[keySnapshot]
	kick     chan struct{} // buffered(1): ask the loop to fetch now
	stop     chan struct{} // closed to end this set's loop
	stopOnce sync.Once
	requests atomic.Int64 // HTTP requests sent

	mu       sync.Mutex
	started  bool
	inflight bool          // a fetch is running (or about to)
	done     chan struct{} // closed when the current/next attempt completes
	attempts int           // completed fetch attempts
	hasKick  bool          // a miss has triggered a refresh before
	lastKick time.Time     // when (JWTConfig.Now)
	lastErr  error         // of the last attempt
}

func newJWKSSet(issuer, rawURL string, refresh time.Duration, algs []string, env *jwtEnv) *jwksSet {
	return &jwksSet{issuer: issuer, url: rawURL, shown: redact.URL(rawURL), refresh: refresh, algs: algs, env: env,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// start launches the background loop once; false after Close.
func (s *jwksSet) start() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return true
	}
	s.env.mu.Lock()
	defer s.env.mu.Unlock()
	if s.env.closed {
		return false
	}
	s.started, s.inflight = true, true
	s.env.wg.Add(1)
	go s.loop()
	return true
}

// close ends the loop (used when a resolved record is replaced).
func (s *jwksSet) close() { s.stopOnce.Do(func() { close(s.stop) }) }

func (s *jwksSet) loop() {
	defer s.env.wg.Done()
	for {
		snap, err := s.fetch()
		s.finish(snap, err)
		wait := s.refresh
		if err != nil {
			wait = s.env.jwks.retry
		}
		t := time.NewTimer(wait)
		select {
		case <-s.env.ctx.Done():
			t.Stop()
			return
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		case <-s.kick:
			t.Stop()
		}
		s.mu.Lock()
		s.inflight = true
		s.mu.Unlock()
	}
}

// finish records the end of an attempt, installs its snapshot (when it
// succeeded) and wakes the requests waiting on it (after logging, so that
// whoever waits sees the log line). The snapshot appears under the lock
// that ends the attempt: a request that finds it comes after the attempt,
// so an unknown kid it then meets triggers a fetch of its own instead of
// waiting on this attempt, which may have fetched before that kid existed.
func (s *jwksSet) finish(snap *keySnapshot, err error) {
	if f := s.env.jwks.onFetch; f != nil && s.env.ctx.Err() == nil {
		f(s.issuer, err)
	}
	if err != nil && s.env.ctx.Err() == nil {
		s.env.logger.Warn("ratekey: JWK Set fetch failed",
			"issuer", s.issuer, "url", s.shown, "error", err.Error(), "kept_last_good_set", s.snap.Load() != nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap != nil {
		s.snap.Store(snap)
	}
	s.inflight = false
	s.attempts++
	s.lastErr = err
	close(s.done)
	s.done = make(chan struct{})
}

// Errors of one fetch (their text names no token and no key material).
var (
	errJWKSStatus   = errors.New("unexpected HTTP status")
	errJWKSTooLarge = errors.New("response body exceeds the size cap")
)

// fetch downloads and parses the set, returning the snapshot to install
// (numbered: a new generation only when the keys changed).
func (s *jwksSet) fetch() (*keySnapshot, error) {
	ctx, cancel := context.WithTimeout(s.env.ctx, s.env.jwks.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, errors.New("cannot build the request")
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	s.requests.Add(1)
	resp, err := s.env.jwks.client.Do(req)
	if err != nil {
		return nil, redact.Error(err) // a *url.Error, whose text names the URL
	}
	defer resp.Body.Close()
	if err := httpsonly.Check(resp.Request.URL); err != nil {
		// A caller's client followed a redirect to plain http: whoever is
		// on that path could hand out keys.
		return nil, fmt.Errorf("redirected: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w %d", errJWKSStatus, resp.StatusCode)
	}
	max := s.env.jwks.maxBytes
	if resp.ContentLength > max {
		return nil, fmt.Errorf("%w (%d bytes)", errJWKSTooLarge, max)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	if int64(len(body)) > max {
		return nil, fmt.Errorf("%w (%d bytes)", errJWKSTooLarge, max)
	}
	snap, err := parseJWKS(body, s.algs, s.env.jwks.maxKeys)
	if err != nil {
		return nil, err
	}
	// Only this set's loop goroutine stores snapshots, so reading the
	// previous one and numbering the new one cannot race.
	switch prev := s.snap.Load(); {
	case prev == nil:
		snap.gen = 1
	case sameKeys(prev, snap):
		snap.gen = prev.gen
	default:
		snap.gen = prev.gen + 1
	}
	return snap, nil
}

// find looks kid up in snap (nil: nothing cached) and returns the key with
// the snapshot's generation. ok is false when the answer may change with a
// refresh (nothing cached, or the kid is unknown).
func find(snap *keySnapshot, kid string, hasKID bool) (bk boundKey, gen uint64, err error, ok bool) {
	if snap == nil {
		return boundKey{}, 0, nil, false
	}
	if !hasKID {
		if snap.only == nil {
			return boundKey{}, 0, errKIDRequired, true
		}
		return *snap.only, snap.gen, nil, true
	}
	if k, found := snap.byKID[kid]; found {
		return k, snap.gen, nil, true
	}
	if _, found := snap.unusable[kid]; found {
		return boundKey{}, 0, errKeyUnusable, true
	}
	return boundKey{}, 0, nil, false
}

// gen returns the generation of the current snapshot (0: none yet).
func (s *jwksSet) gen() uint64 {
	if snap := s.snap.Load(); snap != nil {
		return snap.gen
	}
	return 0
}

// lookup returns the key for a token's kid and the generation of the
// snapshot it came from, refreshing the set (within the cooldown) and
// waiting (within MissWait and ctx) when the kid is unknown or nothing is
// cached.
func (s *jwksSet) lookup(ctx context.Context, kid string, hasKID bool) (boundKey, uint64, error) {
	s.start()
	seen := s.snap.Load()
	if bk, gen, err, ok := find(seen, kid, hasKID); ok {
		return bk, gen, err
	}
	s.awaitRefresh(ctx, seen)
	snap := s.snap.Load()
	if bk, gen, err, ok := find(snap, kid, hasKID); ok {
		return bk, gen, err
	}
	if snap == nil {
		return boundKey{}, 0, ErrKeySourceUnavailable
	}
	return boundKey{}, 0, errUnknownKID
}

// awaitRefresh waits for the fetch in flight, or triggers one if the
// issuer's cooldown allows, bounded by MissWait and ctx. Within the
// cooldown and with nothing in flight it returns at once; so it does when
// a snapshot other than seen (the one the caller looked in) was installed
// meanwhile, for the caller to look again: a miss on an outdated snapshot
// (the first fetch finishing just after the look) neither triggers a
// fetch nor spends the cooldown.
func (s *jwksSet) awaitRefresh(ctx context.Context, seen *keySnapshot) {
	s.mu.Lock()
	ch := s.done
	switch {
	case !s.started || s.snap.Load() != seen:
		s.mu.Unlock()
		return
	case s.inflight:
	default:
		now := s.env.now()
		if s.hasKick && now.Sub(s.lastKick) < s.env.jwks.cooldown {
			s.mu.Unlock()
			return
		}
		s.hasKick, s.lastKick = true, now
		// In flight from the kick on: a request missing the same kid
		// before the loop takes the kick up waits for this fetch too,
		// rather than getting 401 under the cooldown just spent.
		s.inflight = true
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	t := time.NewTimer(s.env.jwks.missWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	case <-s.stop:
	case <-s.env.ctx.Done():
	}
}

// waitFirst blocks until the set completed its first attempt or ctx ends.
func (s *jwksSet) waitFirst(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, ch, err := s.attempts, s.done, s.lastErr
		s.mu.Unlock()
		if n > 0 {
			if s.snap.Load() == nil {
				return fmt.Errorf("identity: issuer %s: %w: %v", quote.Value(s.issuer), ErrKeySourceUnavailable, err)
			}
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("identity: issuer %s: %w: %v", quote.Value(s.issuer), ErrKeySourceUnavailable, ctx.Err())
		}
	}
}
