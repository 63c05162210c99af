package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/ratekey/ratekey/limitkey"
)

// cacheClock is a settable JWTConfig.Now shared by the authenticators of a
// test.
type cacheClock struct{ ns atomic.Int64 }

func newCacheClock(t time.Time) *cacheClock {
	c := &cacheClock{}
	c.set(t)
	return c
}

func (c *cacheClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
func (c *cacheClock) Now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }

// keys returns the set of keys in the cache (tests).
func (c *verifyCache) keys() map[cacheKey]bool {
	m := map[cacheKey]bool{}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		for k := range sh.index {
			m[k] = true
		}
		sh.mu.RUnlock()
	}
	return m
}

// counted returns a's uncached verification counter (installed before any
// concurrent use).
func counted(a *JWTAuthenticator) *atomic.Int64 {
	n := &atomic.Int64{}
	a.onVerify = func() { n.Add(1) }
	return n
}

// newCacheAuth builds the test configuration with cache settings and
// clock now (nil: testNow).
func newCacheAuth(tb testing.TB, size int, ttl time.Duration, now func() time.Time) (*JWTAuthenticator, *atomic.Int64) {
	tb.Helper()
	cfg := testConfig(getKeys(tb))
	cfg.CacheSize, cfg.CacheTTL = size, ttl
	if now != nil {
		cfg.Now = now
	}
	a, err := NewJWTAuthenticator(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return a, counted(a)
}

// outcome is what a verification decided, comparable across paths.
type outcome struct {
	p    limitkey.Principal
	desc string // "" on success; "503" for ErrKeySourceUnavailable
}

func outcomeOf(p limitkey.Principal, err error) outcome {
	var ae *AuthError
	switch {
	case err == nil:
		return outcome{p: p}
	case errors.As(err, &ae):
		return outcome{desc: ae.Description}
	case errors.Is(err, ErrKeySourceUnavailable):
		return outcome{desc: "503"}
	}
	return outcome{desc: "unexpected: " + err.Error()}
}

func verifyOutcome(a *JWTAuthenticator, tok string) outcome {
	return outcomeOf(a.verifyToken(context.Background(), tok))
}

// TestCacheHit: the second verification of a token is answered from the
// cache with the Principal of the first, for every algorithm family.
func TestCacheHit(t *testing.T) {
	k := getKeys(t)
	a, calls := newCacheAuth(t, 0, 0, nil)
	cases := []struct {
		name string
		tok  string
		want limitkey.Principal
	}{
		{"ES256", mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "cli-1")),
			limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", CredentialID: "cli-1", Method: limitkey.MethodJWT}},
		{"RS256", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with("tenant", "t2", "azp", "spa")),
			limitkey.Principal{Issuer: issB, Tenant: "t2", Account: "alice", CredentialID: "spa", Method: limitkey.MethodJWT}},
		{"EdDSA", mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", "bob")),
			limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "bob", Method: limitkey.MethodJWT}},
		{"HS256", mint(t, "HS256", k.hmac, nil, baseClaims(issH)),
			limitkey.Principal{Issuer: issH, Tenant: "hmac", Account: "alice", Method: limitkey.MethodJWT}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for j := 0; j < 3; j++ {
				// An equal token in fresh memory finds the entry too.
				if p := verifyOK(t, a, strings.Clone(c.tok)); p != c.want {
					t.Fatalf("call %d: %+v, want %+v", j, p, c.want)
				}
				if got, want := calls.Load(), int64(i+1); got != want {
					t.Fatalf("call %d: %d full verifications, want %d", j, got, want)
				}
			}
		})
	}
	if n := a.env.cache.len(); n != len(cases) {
		t.Fatalf("cache holds %d entries, want %d", n, len(cases))
	}
}

// TestCacheOneByteDiffers: a token differing from a cached one in one
// byte (anywhere) misses and is verified in full, and refused.
func TestCacheOneByteDiffers(t *testing.T) {
	k := getKeys(t)
	a, calls := newCacheAuth(t, 0, 0, nil)
	tok := mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA))
	verifyOK(t, a, tok)
	dot1 := strings.IndexByte(tok, '.')
	dot2 := strings.LastIndexByte(tok, '.')
	flip := func(i int) string {
		b := []byte(tok)
		b[i] = map[bool]byte{true: 'B', false: 'C'}[b[i] != 'B']
		return string(b)
	}
	cases := []struct {
		name, tok, desc string
	}{
		{"header byte", flip(dot1 / 2), ""},
		{"payload byte", flip((dot1 + dot2) / 2), ""},
		{"signature byte", flip(dot2 + 10), "token signature is invalid"},
		{"last byte", flip(len(tok) - 1), ""}, // malformed or invalid: either refuses
		{"one byte more", tok + "A", ""},
		{"one byte less", tok[:len(tok)-1], ""},
		{"empty signature", tok[:dot2+1], ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := verifyOutcome(a, c.tok)
			if o.desc == "" || (c.desc != "" && o.desc != c.desc) {
				t.Fatalf("outcome %+v, want refusal %q", o, c.desc)
			}
			if got, want := calls.Load(), int64(i+2); got != want {
				t.Fatalf("%d full verifications, want %d", got, want)
			}
		})
	}
	verifyOK(t, a, tok)
	if n := calls.Load(); n != int64(len(cases)+1) {
		t.Fatalf("the original token was verified again: %d full verifications", n)
	}
}

// TestCacheMatchesUncachedOnAllCases: every token of the verification table
// gets the same outcome from an authenticator without cache, and from one
// with a cache on its first and second presentation.
func TestCacheMatchesUncachedOnAllCases(t *testing.T) {
	k := getKeys(t)
	cached, calls := newCacheAuth(t, 0, 0, nil)
	uncached, _ := newCacheAuth(t, -1, 0, nil)
	ok := 0
	for _, c := range jwtCases() {
		tok := c.token(t, k)
		want := verifyOutcome(uncached, tok)
		before := calls.Load()
		first, second := verifyOutcome(cached, tok), verifyOutcome(cached, tok)
		if first != want || second != want {
			t.Errorf("%s: uncached %+v, cached %+v then %+v", c.name, want, first, second)
		}
		// Full verifications: 1 for a valid token (the second answer comes
		// from the cache), 2 for a refused one (never cached), except:
		full := map[string]int64{
			"expired within leeway": 2, // accepted in the leeway only: never served from the cache
			"too long":              0, // refused before hashing or verifying
		}
		wantN, special := full[c.name]
		switch {
		case special:
		case want.desc == "":
			wantN = 1
		default:
			wantN = 2
		}
		if n := calls.Load() - before; n != wantN {
			t.Errorf("%s: verified %d times in full, want %d", c.name, n, wantN)
		}
		if want.desc == "" {
			ok++
		}
	}
	if ok < 4 {
		t.Fatalf("only %d valid tokens in the table", ok)
	}
}

// TestCacheTimeWindow pins what an entry verified at P = T0+1m answers at
// each instant, for a token with iat T0-1m, nbf T0, exp T0+10m and the
// default 30s leeway: the cache answers only inside [P, exp); outside it
// the token is verified in full, which accepts within the leeway.
func TestCacheTimeWindow(t *testing.T) {
	k := getKeys(t)
	t0 := testNow
	exp := t0.Add(10 * time.Minute)
	tok := mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with(
		"iat", t0.Add(-time.Minute).Unix(), "nbf", t0.Unix(), "exp", exp.Unix()))
	prime := t0.Add(time.Minute)
	const (
		notYet  = "token is not valid yet"
		expired = "token is expired"
	)
	cases := []struct {
		at     time.Time
		desc   string // "" = accepted
		cached bool   // answered without a full verification
	}{
		{t0.Add(-31 * time.Second), notYet, false},
		{t0.Add(-30 * time.Second), "", false}, // nbf - leeway
		{t0, "", false},
		{prime.Add(-time.Nanosecond), "", false}, // before the verification instant
		{prime, "", true},
		{t0.Add(5 * time.Minute), "", true},
		{exp.Add(-time.Second), "", true}, // T-1s: from the cache
		{exp.Add(-time.Nanosecond), "", true},
		{exp, "", false}, // within the leeway: full path
		{exp.Add(30*time.Second - time.Nanosecond), "", false},
		{exp.Add(30 * time.Second), expired, false},
		{exp.Add(31 * time.Second), expired, false}, // T+leeway+1s
		{exp.Add(time.Hour), expired, false},
	}
	for _, c := range cases {
		t.Run(c.at.Sub(t0).String(), func(t *testing.T) {
			clk := newCacheClock(prime)
			a, calls := newCacheAuth(t, 0, time.Hour, clk.Now)
			verifyOK(t, a, tok)
			clk.set(c.at)
			o := verifyOutcome(a, tok)
			if o.desc != c.desc {
				t.Fatalf("outcome %q, want %q", o.desc, c.desc)
			}
			if got := calls.Load() == 1; got != c.cached {
				t.Fatalf("answered from the cache: %v, want %v", got, c.cached)
			}
		})
	}
}

// TestCacheTTL: with CacheTTL 2m, an entry verified at T0 is served until
// T0+2m (excluded), then the token is verified again and cached anew.
func TestCacheTTL(t *testing.T) {
	k := getKeys(t)
	clk := newCacheClock(testNow)
	a, calls := newCacheAuth(t, 0, 2*time.Minute, clk.Now)
	tok := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))
	steps := []struct {
		at    time.Duration // after testNow
		calls int64         // full verifications so far
	}{
		{0, 1},
		{time.Minute, 1},
		{2*time.Minute - time.Nanosecond, 1},
		{2 * time.Minute, 2},
		{3 * time.Minute, 2},
		{4 * time.Minute, 3},
	}
	for _, s := range steps {
		clk.set(testNow.Add(s.at))
		verifyOK(t, a, tok)
		if got := calls.Load(); got != s.calls {
			t.Fatalf("at +%v: %d full verifications, want %d", s.at, got, s.calls)
		}
	}
}

// TestCacheSweepMatchesUncached compares a cached and an uncached
// authenticator on one clock at every instant of a fine sweep around a
// token's validity window (every boundary ±1ns), forwards, backwards and
// in random order, for tokens with and without nbf/iat.
func TestCacheSweepMatchesUncached(t *testing.T) {
	k := getKeys(t)
	t0 := testNow
	exp := t0.Add(3 * time.Minute)
	toks := map[string]string{
		"nbf and iat": mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with(
			"iat", t0.Add(-10*time.Second).Unix(), "nbf", t0.Unix(), "exp", exp.Unix())),
		"iat after nbf": mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with(
			"tenant", "t1", "iat", t0.Add(20*time.Second).Unix(), "nbf", t0.Unix(), "exp", exp.Unix())),
		"exp only": mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with(
			"iat", nil, "exp", exp.Unix())),
		"fractional exp": mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with(
			"iat", nil, "exp", float64(exp.Unix())+0.75)),
	}
	var instants []time.Time
	for d := -90 * time.Second; d <= 5*time.Minute; d += 5 * time.Second {
		instants = append(instants, t0.Add(d))
	}
	for _, b := range []time.Time{t0, t0.Add(20 * time.Second), exp} {
		for _, l := range []time.Duration{-30 * time.Second, 0, 30 * time.Second} {
			for _, e := range []time.Duration{-time.Nanosecond, 0, time.Nanosecond} {
				instants = append(instants, b.Add(l+e))
			}
		}
	}
	orders := map[string]func([]time.Time) []time.Time{
		"forwards": func(s []time.Time) []time.Time { return s },
		"backwards": func(s []time.Time) []time.Time {
			r := make([]time.Time, len(s))
			for i, v := range s {
				r[len(s)-1-i] = v
			}
			return r
		},
		"random": func(s []time.Time) []time.Time {
			r := append([]time.Time(nil), s...)
			rng := rand.New(rand.NewPCG(1, 2))
			rng.Shuffle(len(r), func(i, j int) { r[i], r[j] = r[j], r[i] })
			return r
		},
	}
	for name, tok := range toks {
		for oname, order := range orders {
			t.Run(name+"/"+oname, func(t *testing.T) {
				clk := newCacheClock(t0)
				cached, calls := newCacheAuth(t, 0, time.Minute, clk.Now)
				uncached, _ := newCacheAuth(t, -1, 0, clk.Now)
				accepted, hits := 0, 0
				for _, at := range order(instants) {
					clk.set(at)
					want := verifyOutcome(uncached, tok)
					before := calls.Load()
					got := verifyOutcome(cached, tok)
					if got != want {
						t.Fatalf("at T0%+v: cached %+v, uncached %+v", at.Sub(t0), got, want)
					}
					if want.desc == "" {
						accepted++
					}
					if calls.Load() == before {
						hits++
						if want.desc != "" {
							t.Fatalf("at T0%+v: a refusal came from the cache", at.Sub(t0))
						}
					}
				}
				if accepted == 0 || hits == 0 {
					t.Fatalf("sweep exercised nothing: %d accepted, %d cache hits", accepted, hits)
				}
			})
		}
	}
}

// newCacheJWKSAuth is newJWKSAuth with a cache TTL long enough for the
// tests' clock jumps and a verification counter.
func newCacheJWKSAuth(tb testing.TB, now func() time.Time, res IssuerResolver, recs ...IssuerRecord) (*JWTAuthenticator, *atomic.Int64) {
	tb.Helper()
	a, err := NewJWTAuthenticator(JWTConfig{Issuers: recs, Resolver: res, Now: now,
		JWKS: JWKSOptions{MissWait: 5 * time.Second, Refresh: time.Hour, Client: jwksClient(0)}, CacheTTL: 100 * time.Hour,
		ResolverTTL: 10 * time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.Close() })
	return a, counted(a)
}

// TestCacheJWKSRotation: an entry is served only while the issuer's JWK
// Set holds the keys it held when the token was verified.
func TestCacheJWKSRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()), jwk("k2", "EdDSA", k.edOther.Public()))
		now := bubbleNow()
		a, calls := newCacheJWKSAuth(t, now, nil, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		if err := a.Ready(context.Background()); err != nil {
			t.Fatal(err)
		}
		set := a.set(issJ1)
		long := baseClaims(issJ1).with("exp", testNow.Add(90*time.Hour).Unix())
		tok1 := mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, long)
		tok2 := mint(t, "EdDSA", k.edOther, obj{"kid": "k2"}, long)
		attempts := 1
		refresh := func(keys ...obj) {
			t.Helper()
			srv.setKeys(keys...)
			advance(time.Hour)
			attempts++
			set.waitAttempts(t, attempts)
		}
		steps := []struct {
			name   string
			keys   []obj // published before the step (nil: no refresh)
			tok    string
			desc   string
			calls  int64 // full verifications so far
			wantGn uint64
		}{
			{"first verification", nil, tok1, "", 1, 1},
			{"hit", nil, tok1, "", 1, 1},
			{"identical refresh keeps the entry", []obj{jwk("k1", "EdDSA", k.ed.Public()), jwk("k2", "EdDSA", k.edOther.Public())}, tok1, "", 1, 1},
			{"key added: verified again", []obj{jwk("k1", "EdDSA", k.ed.Public()), jwk("k2", "EdDSA", k.edOther.Public()), jwk("k3", "EdDSA", k.edC.Public())}, tok1, "", 2, 2},
			{"hit after the re-verification", nil, tok1, "", 2, 2},
			{"other token cached", nil, tok2, "", 3, 2},
			{"kid bound to another key", []obj{jwk("k1", "EdDSA", k.edD.Public()), jwk("k2", "EdDSA", k.edOther.Public())}, tok1, "token signature is invalid", 4, 3},
			{"refusal not cached", nil, tok1, "token signature is invalid", 5, 3},
			{"kid now names a key this record cannot use", []obj{jwk("k1", "ES256", &k.es.PublicKey), jwk("k2", "EdDSA", k.edOther.Public())}, tok1, "token key is not usable for this issuer", 6, 4},
			{"kid gone", []obj{jwk("k2", "EdDSA", k.edOther.Public())}, tok1, "unknown key id", 7, 5},
			{"surviving kid verified again", nil, tok2, "", 8, 5},
		}
		for _, s := range steps {
			if s.keys != nil {
				refresh(s.keys...)
			}
			o := verifyOutcome(a, s.tok)
			if o.desc != s.desc {
				t.Fatalf("%s: outcome %+v, want %q", s.name, o, s.desc)
			}
			if got := calls.Load(); got != s.calls {
				t.Fatalf("%s: %d full verifications, want %d", s.name, got, s.calls)
			}
			if got := set.gen(); got != s.wantGn {
				t.Fatalf("%s: key-set generation %d, want %d", s.name, got, s.wantGn)
			}
		}
	})
}

// TestCacheResolvedRecord: an entry of a resolved issuer is served only
// while the resolver cache holds that record unexpired; re-resolution,
// replacement and deprovisioning all go through the full path.
func TestCacheResolvedRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.edC.Public()))
		srv2 := newJWKSServer(t, jwk("k1", "EdDSA", k.edD.Public()))
		rec := IssuerRecord{Issuer: issC, Tenant: "customer-c", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: srv.URL}
		res := &resolverFixture{}
		res.set(issC, rec)
		now := bubbleNow()
		a, calls := newCacheJWKSAuth(t, now, res)
		tok := mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issC).with("exp", testNow.Add(48*time.Hour).Unix()))
		want := limitkey.Principal{Issuer: issC, Tenant: "customer-c", Account: "alice", Method: limitkey.MethodJWT}

		steps := []struct {
			name     string
			advance  time.Duration
			change   func()
			desc     string
			calls    int64 // full verifications so far
			resolves int64 // resolver calls so far
		}{
			{"first verification resolves", 0, nil, "", 1, 1},
			{"hit within ResolverTTL", 9 * time.Minute, nil, "", 1, 1},
			{"record due: full path asks the resolver", 2 * time.Minute, nil, "", 2, 2},
			{"unchanged record: hit again", time.Minute, nil, "", 2, 2},
			{"record replaced (another JWK Set)", 10 * time.Minute, func() {
				r := rec
				r.JWKSURL = srv2.URL
				res.set(issC, r)
			}, "token signature is invalid", 3, 3},
			{"original record back", 11 * time.Minute, func() { res.set(issC, rec) }, "", 4, 4},
			{"hit", 0, nil, "", 4, 4},
			{"deprovisioned", 11 * time.Minute, func() {
				res.mu.Lock()
				delete(res.recs, issC)
				res.mu.Unlock()
			}, "token issuer is not accepted", 5, 5},
			{"refusal not cached", 0, nil, "token issuer is not accepted", 6, 6},
		}
		for _, s := range steps {
			if s.change != nil {
				s.change()
			}
			advance(s.advance)
			o := verifyOutcome(a, tok)
			wantO := outcome{desc: s.desc}
			if s.desc == "" {
				wantO.p = want
			}
			if o != wantO {
				t.Fatalf("%s: outcome %+v, want %+v", s.name, o, wantO)
			}
			if got := calls.Load(); got != s.calls {
				t.Fatalf("%s: %d full verifications, want %d", s.name, got, s.calls)
			}
			if got := res.calls.Load(); got != s.resolves {
				t.Fatalf("%s: %d resolver calls, want %d", s.name, got, s.resolves)
			}
		}
	})
}

// TestCacheFailuresNeverCached: refused tokens are verified in full on
// every presentation and never enter the cache.
func TestCacheFailuresNeverCached(t *testing.T) {
	k := getKeys(t)
	a, calls := newCacheAuth(t, 0, 0, nil)
	claims := baseClaims(issA)
	cases := []struct{ name, tok, desc string }{
		{"forged", mint(t, "EdDSA", k.edOther, obj{"kid": "a-ed"}, claims), "token signature is invalid"},
		{"expired", mint(t, "ES256", k.es, obj{"kid": "a-es"}, claims.with("exp", testNow.Add(-time.Hour).Unix())), "token is expired"},
		{"not yet valid", mint(t, "ES256", k.es, obj{"kid": "a-es"}, claims.with("nbf", testNow.Add(time.Hour).Unix())), "token is not valid yet"},
		{"wrong audience", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with("tenant", "t1", "aud", "x")), "token audience is not accepted"},
		{"tenant not listed", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with("tenant", "t9")), "token tenant is not accepted"},
		{"unknown kid", mint(t, "EdDSA", k.ed, obj{"kid": "nope"}, claims), "unknown key id"},
		{"crit", mint(t, "EdDSA", k.ed, obj{"kid": "a-ed", "crit": []string{"exp"}}, claims), "token has a critical header parameter that is not understood"},
		{"unknown issuer", mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, claims.with("iss", "https://x.example/")), "token issuer is not accepted"},
		{"too long", strings.Repeat("A", maxTokenBytes+1), "token is too long"},
	}
	var full int64
	for _, c := range cases {
		for i := 0; i < 3; i++ {
			if o := verifyOutcome(a, c.tok); o.desc != c.desc {
				t.Fatalf("%s #%d: %+v, want %q", c.name, i, o, c.desc)
			}
		}
		if c.name != "too long" { // refused before hashing or verifying
			full += 3
		}
		if got := calls.Load(); got != full {
			t.Fatalf("%s: %d full verifications, want %d", c.name, got, full)
		}
	}
	if n := a.env.cache.len(); n != 0 {
		t.Fatalf("cache holds %d entries after refusals only", n)
	}
}

// TestCacheBounded: floods of distinct valid tokens never grow the cache
// beyond CacheSize, a token in use survives them (CLOCK), and floods of
// invalid tokens evict nothing.
func TestCacheBounded(t *testing.T) {
	k := getKeys(t)
	for _, size := range []int{10, 300} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a, calls := newCacheAuth(t, size, 0, nil)
			sum := 0
			for i := range a.env.cache.shards {
				sum += a.env.cache.shards[i].max
			}
			if sum != size {
				t.Fatalf("shard capacities add up to %d, want %d", sum, size)
			}
			tokFor := func(sub string) string {
				return mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", sub))
			}
			hot := tokFor("hot")
			verifyOK(t, a, hot)
			for i := 0; i < 3*size; i++ {
				if p := verifyOK(t, a, tokFor(fmt.Sprint("flood-", i))); p.Account != fmt.Sprint("flood-", i) {
					t.Fatalf("principal %+v", p)
				}
				verifyOK(t, a, hot)
				if n := a.env.cache.len(); n > size {
					t.Fatalf("after %d tokens the cache holds %d entries, bound %d", i+1, n, size)
				}
			}
			if n := a.env.cache.len(); n != size {
				t.Fatalf("cache holds %d entries, want %d (full)", n, size)
			}
			if got, want := calls.Load(), int64(1+3*size); got != want {
				t.Fatalf("%d full verifications, want %d (the hot token verified once)", got, want)
			}

			// A flood of forgeries changes nothing in the cache.
			before := a.env.cache.keys()
			for i := 0; i < 2*size; i++ {
				forged := mint(t, "EdDSA", k.edOther, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", fmt.Sprint("forged-", i)))
				verifyDesc(t, a, forged, "token signature is invalid")
			}
			if after := a.env.cache.keys(); !reflect.DeepEqual(after, before) {
				t.Fatalf("the forgery flood changed the cached keys (%d before, %d after)", len(before), len(after))
			}
			n := calls.Load()
			verifyOK(t, a, hot)
			if calls.Load() != n {
				t.Fatal("the hot token was evicted")
			}
		})
	}
}

// TestCacheKeepsOwnCopy: the cache keeps its own copy of a verified token
// (for the comparison on a hit), never the caller's memory: once the caller
// drops the token, its memory is collected while the entry stays usable.
func TestCacheKeepsOwnCopy(t *testing.T) {
	// By type: the key is a uint64 hash; the only variable-size data in a
	// slot are the Principal's strings and the token copy (a pointer).
	if got := reflect.TypeFor[cacheKey](); got.Kind() != reflect.Uint64 {
		t.Fatalf("cache key type %v, want a uint64 hash", got)
	}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		switch ty.Kind() {
		case reflect.String, reflect.Slice, reflect.Interface, reflect.Map:
			if !strings.HasPrefix(path, "cacheSlot.ent.p.") {
				t.Errorf("%s is a %v: a slot may hold variable-size data only in its limitkey.Principal and its token copy", path, ty)
			}
		case reflect.Struct:
			if ty.PkgPath() == "sync/atomic" || ty == reflect.TypeFor[secretBytes]() {
				return
			}
			for i := 0; i < ty.NumField(); i++ {
				f := ty.Field(i)
				walk(f.Type, path+"."+f.Name)
			}
		}
	}
	walk(reflect.TypeFor[cacheSlot](), "cacheSlot")

	// By reachability.
	k := getKeys(t)
	a, calls := newCacheAuth(t, 0, 0, nil)
	tok := mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with("tenant", "t1", "client_id", "cli-9"))
	collected := make(chan struct{})
	func() {
		buf := []byte(tok)
		runtime.AddCleanup(&buf[0], func(ch chan struct{}) { close(ch) }, collected)
		verifyOK(t, a, unsafe.String(&buf[0], len(buf)))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for done := false; !done; {
		runtime.GC()
		select {
		case <-collected:
			done = true
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the verified token's memory is still reachable")
			}
		}
	}
	// The entry outlived the token's memory and still answers.
	if p := verifyOK(t, a, tok); p.CredentialID != "cli-9" || calls.Load() != 1 {
		t.Fatalf("entry lost: %+v after %d full verifications", p, calls.Load())
	}
}

// TestCacheTokenNeverPrints: the token copy in a slot shows in no rendering
// of the copy, the slot, a shard or the whole cache (fmt with every common
// verb, encoding/json, log/slog), neither as text nor as bytes.
func TestCacheTokenNeverPrints(t *testing.T) {
	k := getKeys(t)
	a, _ := newCacheAuth(t, 10, 0, nil)
	tok := mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "cli-1"))
	verifyOK(t, a, tok)
	c := a.env.cache
	sh := c.shard(c.key(tok))
	slot := &sh.slots[sh.index[c.key(tok)]]
	if !slot.tok.equal(tok) {
		t.Fatal("the slot does not hold the token")
	}
	sig := tok[strings.LastIndexByte(tok, '.')+1:]
	forms := []string{tok, sig, sig[:16], fmt.Sprint([]byte(sig[:8])), fmt.Sprintf("%x", sig[:8]), fmt.Sprintf("%X", sig[:8])}
	for _, v := range []any{slot.tok, &slot.tok, slot, sh, c} {
		var outs []string
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
			outs = append(outs, fmt.Sprintf(verb, v))
		}
		j, err := json.Marshal(v)
		if err == nil {
			outs = append(outs, string(j))
		}
		var buf strings.Builder
		slog.New(slog.NewTextHandler(&buf, nil)).Info("cache", "v", v)
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("cache", "v", v)
		outs = append(outs, buf.String())
		for i, out := range outs {
			for j, f := range forms {
				if strings.Contains(out, f) { // the message names, never shows, it
					t.Fatalf("%T printed the token: rendering %d holds form %d", v, i, j)
				}
			}
		}
	}
	if got := fmt.Sprintf("%v %s %#v", slot.tok, slot.tok, slot.tok); got != "[REDACTED] [REDACTED] [REDACTED]" {
		t.Fatalf("the copy prints as %q", got)
	}
}

// TestCacheCollision: with every token hashing to the same key (the
// forceCollisions hook), an entry still answers only its own token: another
// valid token gets its own Principal (verified in full, taking the slot
// over), a forged one is refused, and the original, presented again, is
// verified in full and gets its own Principal back.
func TestCacheCollision(t *testing.T) {
	k := getKeys(t)
	for _, size := range []int{1, 10, 300} { // one shard, one shard with room, 16 shards
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a, calls := newCacheAuth(t, size, 0, nil)
			a.env.cache.forceCollisions = true
			alice := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("client_id", "cli-a"))
			bob := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", "bob", "client_id", "cli-b"))
			forged := mint(t, "EdDSA", k.edOther, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", "mallory"))
			wantA := limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", CredentialID: "cli-a", Method: limitkey.MethodJWT}
			wantB := limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "bob", CredentialID: "cli-b", Method: limitkey.MethodJWT}
			steps := []struct {
				name  string
				tok   string
				want  limitkey.Principal
				desc  string
				calls int64 // full verifications so far
			}{
				{"alice verified and cached", alice, wantA, "", 1},
				{"alice from the cache", strings.Clone(alice), wantA, "", 1},
				{"bob collides with alice: verified in full", bob, wantB, "", 2},
				{"bob from the cache", strings.Clone(bob), wantB, "", 2},
				{"a forgery colliding with bob is refused", forged, limitkey.Principal{}, "token signature is invalid", 3},
				{"alice again: verified in full, her own principal", alice, wantA, "", 4},
				{"bob's entry was taken over", bob, wantB, "", 5},
				{"alice's prefix is not alice", alice[:len(alice)-1], limitkey.Principal{}, "x", 6},
			}
			for _, s := range steps {
				p, err := a.verifyToken(context.Background(), s.tok)
				switch {
				case s.desc == "" && (err != nil || p != s.want):
					t.Fatalf("%s: %+v %v, want %+v", s.name, p, err, s.want)
				case s.desc != "" && err == nil:
					t.Fatalf("%s: accepted as %+v", s.name, p)
				case s.desc != "" && s.desc != "x" && err.(*AuthError).Description != s.desc:
					t.Fatalf("%s: %v, want %q", s.name, err, s.desc)
				}
				if got := calls.Load(); got != s.calls {
					t.Fatalf("%s: %d full verifications, want %d", s.name, got, s.calls)
				}
			}
			if n := a.env.cache.len(); n != 1 {
				t.Fatalf("the colliding tokens left %d entries, want 1", n)
			}
		})
	}
}

// TestCacheCopyZeroed: when another token takes a slot over, the previous
// token's bytes are overwritten: in place when the new token fits in their
// array, else with zeros (the array is then left to the collector).
func TestCacheCopyZeroed(t *testing.T) {
	k := getKeys(t)
	short := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))
	long := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", strings.Repeat("b", 200)))
	zero := func(b []byte) bool { return strings.Trim(string(b), "\x00") == "" }
	cases := []struct {
		name        string
		first, then string
		inPlace     bool
	}{
		{"shorter token: same array", long, short, true},
		{"longer token: new array, the old one zeroed", short, long, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, _ := newCacheAuth(t, 1, 0, nil)
			slot := func() *cacheSlot { return &a.env.cache.shards[0].slots[0] }
			verifyOK(t, a, c.first)
			old := unsafe.Slice(slot().tok.p, slot().tok.c)
			verifyOK(t, a, c.then) // a one-entry cache: the slot is taken over
			if !slot().tok.equal(c.then) || a.env.cache.len() != 1 {
				t.Fatal("the slot does not hold the second token")
			}
			if inPlace := slot().tok.p == &old[0]; inPlace != c.inPlace {
				t.Fatalf("same array: %v, want %v", inPlace, c.inPlace)
			}
			rest := old
			if c.inPlace {
				if string(old[:len(c.then)]) != c.then {
					t.Fatalf("the array starts with %q", old[:len(c.then)])
				}
				rest = old[len(c.then):]
			}
			if !zero(rest) {
				t.Fatalf("the first token's bytes are still there: %q", rest)
			}
		})
	}
}

// TestCacheWipedOnClose: Close zeroes every token copy and empties the
// cache; the authenticator then answers as before, verifying in full.
func TestCacheWipedOnClose(t *testing.T) {
	k := getKeys(t)
	a, calls := newCacheAuth(t, 300, 0, nil)
	var toks []string
	var arrays [][]byte
	for i := range 20 {
		tok := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", fmt.Sprint("user-", i)))
		verifyOK(t, a, tok)
		c := a.env.cache
		sh := c.shard(c.key(tok))
		s := &sh.slots[sh.index[c.key(tok)]]
		toks, arrays = append(toks, tok), append(arrays, unsafe.Slice(s.tok.p, s.tok.c))
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for i, b := range arrays {
		if strings.Trim(string(b), "\x00") != "" {
			t.Fatalf("token %d: its copy was not zeroed", i)
		}
	}
	if n := a.env.cache.len(); n != 0 {
		t.Fatalf("the cache holds %d entries after Close", n)
	}
	for i, tok := range toks {
		if p := verifyOK(t, a, tok); p.Account != fmt.Sprint("user-", i) {
			t.Fatalf("after Close: %+v", p)
		}
	}
	if got := calls.Load(); got != 40 {
		t.Fatalf("%d full verifications, want 40 (20 before Close, 20 after)", got)
	}
	verifyOK(t, a, toks[0]) // cached again
	if calls.Load() != 40 {
		t.Fatal("the cache does not work after Close")
	}
}

// TestCacheConfig: the defaults, disabling, and the errors.
func TestCacheConfig(t *testing.T) {
	k := getKeys(t)
	tok := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))
	cases := []struct {
		size   int
		ttl    time.Duration
		err    string
		total  int
		ttlGot time.Duration
		calls  int64 // after three verifications
	}{
		{0, 0, "", defaultJWTCacheSize, defaultJWTCacheTTL, 1},
		{1, time.Second, "", 1, time.Second, 1},
		{255, 0, "", 255, defaultJWTCacheTTL, 1},
		{-1, 0, "", 0, 0, 3},
		{-1, time.Minute, "", 0, 0, 3},
		{0, -time.Second, "cache_ttl: -1s is negative", 0, 0, 0},
		{1<<26 + 1, 0, "cache_size: 67108865 exceeds 67108864", 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.size, "/", c.ttl), func(t *testing.T) {
			cfg := testConfig(k)
			cfg.CacheSize, cfg.CacheTTL = c.size, c.ttl
			a, err := NewJWTAuthenticator(cfg)
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cache := a.env.cache
			if (cache == nil) != (c.total == 0) {
				t.Fatalf("cache %v, want size %d", cache, c.total)
			}
			if cache != nil {
				sum := 0
				for i := range cache.shards {
					sum += cache.shards[i].max
				}
				if sum != c.total || cache.ttl != c.ttlGot {
					t.Fatalf("size %d ttl %v, want %d %v", sum, cache.ttl, c.total, c.ttlGot)
				}
			}
			calls := counted(a)
			for i := 0; i < 3; i++ {
				verifyOK(t, a, tok)
			}
			if calls.Load() != c.calls {
				t.Fatalf("%d full verifications, want %d", calls.Load(), c.calls)
			}
		})
	}
}

// TestCacheConcurrent: many goroutines present valid and forged tokens to a
// small cache that keeps evicting (run with -race); every answer is the
// uncached one.
func TestCacheConcurrent(t *testing.T) {
	k := getKeys(t)
	a, _ := newCacheAuth(t, 8, 0, nil)
	type tc struct {
		tok  string
		want string // Account, or "" for a refusal
	}
	var toks []tc
	for i := 0; i < 24; i++ {
		sub := fmt.Sprint("user-", i)
		toks = append(toks, tc{mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", sub)), sub})
		if i%4 == 0 {
			toks = append(toks, tc{mint(t, "EdDSA", k.edOther, obj{"kid": "a-ed"}, baseClaims(issA).with("sub", sub)), ""})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < 150; i++ {
				c := toks[rng.IntN(len(toks))]
				p, err := a.verifyToken(context.Background(), c.tok)
				if (err == nil) != (c.want != "") || p.Account != c.want {
					errs <- fmt.Errorf("token of %q: %+v, %v", c.want, p, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := a.env.cache.len(); n > 8 {
		t.Fatalf("cache holds %d entries, bound 8", n)
	}
}

// TestCacheHitAllocs pins the zero-allocation hit.
func TestCacheHitAllocs(t *testing.T) {
	k := getKeys(t)
	a, _ := newCacheAuth(t, 0, 0, nil)
	tok := mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA))
	verifyOK(t, a, tok)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		if _, err := a.verifyToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("a cache hit allocates %v times", n)
	}
}

// FuzzCacheMatchesUncached: whatever the input, an authenticator whose
// cache holds every seed's entry answers exactly as one without a cache,
// on the first and the second presentation; so does one whose tokens all
// collide (forceCollisions), whose one entry is some other token's.
func FuzzCacheMatchesUncached(f *testing.F) {
	k := getKeys(f)
	cached, _ := newCacheAuth(f, 0, 0, nil)
	colliding, _ := newCacheAuth(f, 0, 0, nil)
	colliding.env.cache.forceCollisions = true
	uncached, _ := newCacheAuth(f, -1, 0, nil)
	seeds := []string{
		mint(f, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "c")),
		mint(f, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with("tenant", "t1")),
		mint(f, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA)),
		mint(f, "HS256", k.hmac, nil, baseClaims(issH)),
	}
	for _, s := range seeds {
		verifyOK(f, cached, s)
		verifyOK(f, colliding, s)
		f.Add(s)
	}
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		want := verifyOutcome(uncached, tok)
		for _, a := range []*JWTAuthenticator{cached, colliding} {
			if got := verifyOutcome(a, tok); got != want {
				t.Fatalf("cached %+v, uncached %+v (colliding: %v)", got, want, a == colliding)
			}
			if got := verifyOutcome(a, tok); got != want {
				t.Fatalf("second presentation: cached %+v, uncached %+v (colliding: %v)", got, want, a == colliding)
			}
		}
	})
}

// TestAuthenticateCachedShape: JWTAuthenticator.Authenticate skips the
// b64token scan for a token the cache answers, so its outcome for any
// Authorization header, with the token cached or not, must be exactly
// bearerToken's then verifyToken's on an authenticator without a cache:
// the same Principal, or an error with the same code, description and
// sentinel.
func TestAuthenticateCachedShape(t *testing.T) {
	k := getKeys(t)
	tok := mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "cli-1"))
	cached, calls := newCacheAuth(t, 0, 0, nil)
	verifyOK(t, cached, tok) // cached from here on
	cfg := testConfig(k)
	cfg.CacheSize = -1
	plain, err := NewJWTAuthenticator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		p             limitkey.Principal
		code, desc    string
		sentinel, msg string
	}
	resultOf := func(p limitkey.Principal, err error) result {
		var ae *AuthError
		switch {
		case err == nil:
			return result{p: p}
		case errors.As(err, &ae):
			return result{code: ae.Code, desc: ae.Description, sentinel: fmt.Sprint(ae.Err)}
		}
		return result{msg: err.Error()}
	}
	for _, v := range [][]string{
		{"Bearer " + tok},
		{"bearer  " + tok},
		{"Bearer " + tok + " "},
		{"Bearer " + tok + ","},
		{"Bearer " + tok + "="},
		{"Bearer " + tok + "=="},
		{"Bearer " + tok[:len(tok)-1]},
		{"Bearer " + tok[:10] + " " + tok[10:]},
		{"Bearer " + tok[:10] + "\x00" + tok[11:]},
		{"Bearer\t" + tok},
		{"Basic " + tok},
		{"Bearer " + tok, "Bearer " + tok},
		{"Bearer " + tok + strings.Repeat("A", maxTokenBytes)},
		{"Bearer "},
		{""},
		nil,
	} {
		h := http.Header{}
		if v != nil {
			h["Authorization"] = v
		}
		want := resultOf(func() (limitkey.Principal, error) {
			tok, err := bearerToken(h)
			if err != nil {
				return limitkey.Principal{}, err
			}
			return plain.verifyToken(context.Background(), tok)
		}())
		got := resultOf(cached.Authenticate(headerRequest(h)))
		if got != want {
			t.Errorf("Authorization %q: got %+v, want %+v", v, got, want)
		}
	}
	// The cached token itself was never verified again.
	n := calls.Load()
	for range 3 {
		if _, err := cached.Authenticate(headerRequest(http.Header{"Authorization": {"Bearer " + strings.Clone(tok)}})); err != nil {
			t.Fatal(err)
		}
	}
	if m := calls.Load(); m != n {
		t.Errorf("%d uncached verifications of a cached token, want 0", m-n)
	}
}

// TestCachePutOnlyB64Token: the cache refuses a token outside the
// b64token charset (Authenticate relies on it), whatever its verification.
func TestCachePutOnlyB64Token(t *testing.T) {
	k := getKeys(t)
	tok := mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA))
	a, _ := newCacheAuth(t, 0, 0, nil)
	p, v, err := a.verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	c := a.env.cache
	for _, bad := range []string{tok + " ", tok + ",", "a=b", tok + "\x00", ""} {
		c.put(c.key(bad), bad, p, v, a.env)
	}
	if n := c.len(); n != 0 {
		t.Fatalf("the cache holds %d entries for tokens outside b64token, want 0", n)
	}
	c.put(c.key(tok), tok, p, v, a.env)
	if n := c.len(); n != 1 {
		t.Fatalf("the cache holds %d entries after caching a token, want 1", n)
	}
}

// len returns the number of entries (tests).
func (c *verifyCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += len(sh.index)
		sh.mu.RUnlock()
	}
	return n
}
