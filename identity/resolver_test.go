package identity

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekey/ratekey/internal/jwkey"
	"github.com/ratekey/ratekey/limitkey"
)

// resolverFixture resolves issuers from a mutable map and counts calls.
type resolverFixture struct {
	mu    sync.Mutex
	recs  map[string]IssuerRecord
	err   error
	calls atomic.Int64
	gate  chan struct{} // non-nil: calls wait for it
}

func (f *resolverFixture) ResolveIssuer(ctx context.Context, iss string) (IssuerRecord, error) {
	f.calls.Add(1)
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return IssuerRecord{}, f.err
	}
	rec, ok := f.recs[iss]
	if !ok {
		return IssuerRecord{}, fmt.Errorf("lookup %w", ErrUnknownIssuer)
	}
	return rec, nil
}

func (f *resolverFixture) set(iss string, rec IssuerRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.recs == nil {
		f.recs = map[string]IssuerRecord{}
	}
	f.recs[iss] = rec
}

func newResolverAuth(tb testing.TB, now func() time.Time, logs *logBuffer, res IssuerResolver, static ...IssuerRecord) *JWTAuthenticator {
	tb.Helper()
	a, err := NewJWTAuthenticator(JWTConfig{Issuers: static, Resolver: res, Now: now,
		ResolverTTL: 10 * time.Minute, MaxResolvedIssuers: 3, Logger: logs.logger(),
		JWKS: JWKSOptions{MissWait: 2 * time.Second, Client: jwksClient(0)}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.Close() })
	return a
}

func TestResolver(t *testing.T) {
	k := getKeys(t)
	srv := newJWKSServer(t, jwk("k1", "EdDSA", k.edC.Public()))
	res := &resolverFixture{}
	res.set(issC, IssuerRecord{Issuer: issC, Tenant: "customer-c", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: srv.URL})
	static := IssuerRecord{Issuer: issA, Tenant: "acme", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
		Keys: []VerificationKey{{KID: "a", Key: k.ed.Public()}}}
	// A manual Now, outside a bubble: this test waits on no timer, and its
	// subtests could not run in one.
	clk := newCacheClock(testNow)
	logs := &logBuffer{}
	a := newResolverAuth(t, clk.Now, logs, res, static)
	tokC := mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issC).with("exp", testNow.Add(48*time.Hour).Unix()))

	t.Run("resolved and cached", func(t *testing.T) {
		p := verifyOK(t, a, tokC)
		if p.Tenant != "customer-c" || p.Issuer != issC {
			t.Fatalf("%+v", p)
		}
		verifyOK(t, a, tokC)
		if n := res.calls.Load(); n != 1 {
			t.Fatalf("resolver calls = %d, want 1", n)
		}
	})
	t.Run("static issuers never reach the resolver", func(t *testing.T) {
		before := res.calls.Load()
		verifyOK(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "a"}, baseClaims(issA)))
		if res.calls.Load() != before {
			t.Fatal("resolver consulted for a static issuer")
		}
	})
	t.Run("unknown issuer is 401", func(t *testing.T) {
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims("https://nobody.example/")), "token issuer is not accepted")
	})
	t.Run("resolved record's key never verifies a static issuer", func(t *testing.T) {
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "a"}, baseClaims(issA)), "token signature is invalid")
	})
	t.Run("record for another issuer is refused", func(t *testing.T) {
		res.set("https://alias.example/", IssuerRecord{Issuer: issC, Tenant: "x", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: srv.URL})
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims("https://alias.example/")), "token issuer is not accepted")
		if !strings.Contains(logs.String(), "record for another issuer") {
			t.Fatal(logs)
		}
	})
	t.Run("tenant of a static issuer is refused", func(t *testing.T) {
		res.set("https://thief.example/", IssuerRecord{Issuer: "https://thief.example/", Tenant: "acme", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: srv.URL})
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims("https://thief.example/")), "token issuer is not accepted")
		if !strings.Contains(logs.String(), "tenant another issuer vouches for") {
			t.Fatal(logs)
		}
	})
	t.Run("tenant of a resolved issuer is refused", func(t *testing.T) {
		res.set("https://thief2.example/", IssuerRecord{Issuer: "https://thief2.example/", TenantClaim: "org", Tenants: []string{"customer-c"}, Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: srv.URL})
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims("https://thief2.example/").with("org", "customer-c")), "token issuer is not accepted")
	})
	t.Run("invalid record is 503", func(t *testing.T) {
		res.set("https://broken.example/", IssuerRecord{Issuer: "https://broken.example/", Tenant: "b", Algorithms: []string{"none"}})
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims("https://broken.example/")), "503")
		if !strings.Contains(logs.String(), "invalid record") {
			t.Fatal(logs)
		}
	})
	t.Run("resolver down: old record kept, new issuers 503", func(t *testing.T) {
		res.mu.Lock()
		res.err = errors.New("database unreachable")
		res.mu.Unlock()
		clk.set(clk.Now().Add(11 * time.Minute))
		tok := mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issC).with("iat", clk.Now().Unix()))
		verifyOK(t, a, tok)
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims("https://new.example/")), "503")
		// Still down: the record was last confirmed 11 minutes ago, so it is
		// kept until 20 minutes after that (one TTL past its expiry), then
		// dropped however long the resolver stays down.
		clk.set(clk.Now().Add(8 * time.Minute)) // 19 minutes after the confirmation
		verifyOK(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issC).with("iat", clk.Now().Unix())))
		clk.set(clk.Now().Add(2 * time.Minute)) // 21 minutes
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issC).with("iat", clk.Now().Unix())), "503")
		res.mu.Lock()
		res.err = nil
		res.mu.Unlock()
	})
	t.Run("deprovisioned issuer is dropped", func(t *testing.T) {
		res.mu.Lock()
		delete(res.recs, issC)
		res.mu.Unlock()
		clk.set(clk.Now().Add(11 * time.Minute))
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issC).with("iat", clk.Now().Unix())), "token issuer is not accepted")
	})
}

// TestResolverTenantPassesToAnotherIssuer: one tenant, one issuer, also
// across expiries. Issuer X vouches for a tenant; Y, claiming it too, is
// refused. Once X's entry has expired Y may take the tenant over; X is then
// refused, whether the resolver confirms X's record again (401, and X's
// entry is dropped) or is down (503, X is not kept for the outage).
func TestResolverTenantPassesToAnotherIssuer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.edC.Public()))
		const issX, issY = "https://x.example/", "https://y.example/"
		res := &resolverFixture{}
		for _, iss := range []string{issX, issY} {
			res.set(iss, IssuerRecord{Issuer: iss, Tenant: "shared", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: srv.URL})
		}
		now := bubbleNow()
		logs := &logBuffer{}
		a := newResolverAuth(t, now, logs, res)
		tok := func(iss string) string {
			return mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(iss).with("iat", now().Unix(), "exp", now().Add(time.Hour).Unix()))
		}
		setErr := func(err error) {
			res.mu.Lock()
			res.err = err
			res.mu.Unlock()
		}

		verifyOK(t, a, tok(issX))
		verifyDesc(t, a, tok(issY), "token issuer is not accepted")
		advance(11 * time.Minute) // X's entry expired (TTL 10 minutes)
		if p := verifyOK(t, a, tok(issY)); p.Issuer != issY || p.Tenant != "shared" {
			t.Fatalf("Y after X expired: %+v", p)
		}
		setErr(errors.New("database unreachable"))
		verifyDesc(t, a, tok(issX), "503") // not kept: Y vouches for the tenant now
		setErr(nil)
		verifyDesc(t, a, tok(issX), "token issuer is not accepted") // confirmed, but the tenant is Y's
		verifyOK(t, a, tok(issY))
		if n := strings.Count(logs.String(), "tenant another issuer vouches for"); n != 2 {
			t.Errorf("%d refusals logged, want 2:\n%s", n, logs)
		}
	})
}

// TestResolverSharesConcurrentCalls: a burst of tokens for one new issuer
// makes one resolver call and one JWK Set.
func TestResolverSharesConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.edC.Public()))
		res := &resolverFixture{gate: make(chan struct{})}
		res.set(issC, IssuerRecord{Issuer: issC, Tenant: "c", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: srv.URL})
		now := bubbleNow()
		a := newResolverAuth(t, now, &logBuffer{}, res)
		tok := mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issC))
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := a.verifyToken(context.Background(), tok)
				errs <- err
			}()
		}
		synctest.Wait() // one token in the resolver, the others waiting for its call
		if n := res.calls.Load(); n != 1 {
			t.Fatalf("resolver calls %d while the first is held; want 1", n)
		}
		close(res.gate)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if res.calls.Load() != 1 || srv.hits.Load() != 1 {
			t.Fatalf("resolver calls %d, fetches %d; want 1, 1", res.calls.Load(), srv.hits.Load())
		}
	})
}

// TestResolverBounded: at most MaxResolvedIssuers records are held; expired
// ones make room.
func TestResolverBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		res := &resolverFixture{}
		for i := 0; i < 5; i++ {
			iss := fmt.Sprintf("https://r%d.example/", i)
			res.set(iss, IssuerRecord{Issuer: iss, Tenant: fmt.Sprint("t", i), Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
				Keys: []VerificationKey{{Key: k.ed.Public()}}})
		}
		now := bubbleNow()
		logs := &logBuffer{}
		a := newResolverAuth(t, now, logs, res)
		for i := 0; i < 3; i++ {
			verifyOK(t, a, mint(t, "EdDSA", k.ed, nil, baseClaims(fmt.Sprintf("https://r%d.example/", i))))
		}
		verifyDesc(t, a, mint(t, "EdDSA", k.ed, nil, baseClaims("https://r3.example/")), "503")
		if !strings.Contains(logs.String(), "too many resolved issuers") {
			t.Fatal(logs)
		}
		advance(11 * time.Minute)
		verifyOK(t, a, mint(t, "EdDSA", k.ed, nil, baseClaims("https://r3.example/").with("iat", now().Unix(), "exp", now().Add(time.Hour).Unix())))
	})
}

func TestResolverOnlyConfig(t *testing.T) {
	if _, err := NewJWTAuthenticator(JWTConfig{Resolver: &resolverFixture{}}); err != nil {
		t.Fatalf("resolver without static issuers: %v", err)
	}
	if _, err := NewJWTAuthenticator(JWTConfig{}); err == nil || err.Error() != "issuers: at least one issuer record is required (or a resolver)" {
		t.Fatalf("err = %v", err)
	}
}

// TestTyp pins the optional typ requirement (RFC 8725 §3.11, RFC 9068 §4).
func TestTyp(t *testing.T) {
	k := getKeys(t)
	a, err := NewJWTAuthenticator(JWTConfig{Now: func() time.Time { return testNow }, Issuers: []IssuerRecord{
		{Issuer: issA, Tenant: "a", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, Typ: "at+jwt",
			Keys: []VerificationKey{{Key: k.ed.Public()}}},
		{Issuer: issB, Tenant: "b", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
			Keys: []VerificationKey{{Key: k.ed.Public()}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tok := func(iss string, typ any) string {
		h := obj{"alg": "EdDSA"}
		if typ != nil {
			h["typ"] = typ
		}
		m, _ := jwkey.SigningMethodFor("EdDSA")
		return signRaw(t, m, k.ed, h.json(), baseClaims(iss).json())
	}
	for _, tc := range []struct {
		iss  string
		typ  any
		desc string
	}{
		{issA, "at+jwt", ""},
		{issA, "application/at+jwt", ""},
		{issA, "AT+JWT", ""},
		{issA, "JWT", "token type is not accepted"},
		{issA, nil, "token type is not accepted"},
		{issA, "application/jwt", "token type is not accepted"},
		{issA, "at+jwt ", "token type is not accepted"},
		{issA, 1, "token is malformed"},
		{issB, "JWT", ""},
		{issB, nil, ""},
		{issB, "anything", ""},
	} {
		_, err := a.verifyToken(context.Background(), tok(tc.iss, tc.typ))
		if tc.desc == "" {
			if err != nil {
				t.Errorf("%s typ %v: %v", tc.iss, tc.typ, err)
			}
			continue
		}
		var ae *AuthError
		if !errors.As(err, &ae) || ae.Description != tc.desc {
			t.Errorf("%s typ %v: err = %v, want %q", tc.iss, tc.typ, err, tc.desc)
		}
	}
}

// gatedResolver: calls for issuer gateIss block until gate is closed.
type gatedResolver struct {
	mu      sync.Mutex
	recs    map[string]IssuerRecord
	gateIss string
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedResolver) ResolveIssuer(ctx context.Context, iss string) (IssuerRecord, error) {
	g.mu.Lock()
	gate, ent := g.gate, g.entered
	gated := iss == g.gateIss && gate != nil
	rec, ok := g.recs[iss]
	g.mu.Unlock()
	if gated {
		close(ent)
		<-gate
	}
	if !ok {
		return IssuerRecord{}, fmt.Errorf("x %w", ErrUnknownIssuer)
	}
	return rec, nil
}

// gateNext makes the resolver's next calls for iss wait until g.gate is
// closed, closing g.entered when the first one starts.
func (g *gatedResolver) gateNext(iss string) {
	g.mu.Lock()
	g.gateIss, g.gate, g.entered = iss, make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
}

// newGatedAuth returns an authenticator resolving issuers with g (TTL 10
// minutes, at most 1 resolved issuer) on the bubble's clock, and a
// function minting an hour-long EdDSA token of an issuer, now.
func newGatedAuth(t *testing.T, g *gatedResolver) (*JWTAuthenticator, func(iss string) string) {
	t.Helper()
	k := getKeys(t)
	now := bubbleNow()
	a, err := NewJWTAuthenticator(JWTConfig{Resolver: g, Now: now, ResolverTTL: 10 * time.Minute, MaxResolvedIssuers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a, func(iss string) string {
		return mint(t, "EdDSA", k.ed, nil, baseClaims(iss).with("iat", now().Unix(), "exp", now().Add(time.Hour).Unix()))
	}
}

// TestResolverTenantTakenDuringConfirmation: while the resolver confirms
// X's expired record, Y takes X's tenant and X's entry is evicted to make
// room (MaxResolvedIssuers 1): the confirmation must not accept X's token
// for a tenant Y vouches for.
func TestResolverTenantTakenDuringConfirmation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		const issX, issY = "https://x.example/", "https://y.example/"
		g := &gatedResolver{recs: map[string]IssuerRecord{}}
		for _, iss := range []string{issX, issY} {
			g.recs[iss] = IssuerRecord{Issuer: iss, Tenant: "shared", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
				Keys: []VerificationKey{{Key: k.ed.Public()}}}
		}
		a, tok := newGatedAuth(t, g)
		verifyOK(t, a, tok(issX))
		advance(11 * time.Minute) // X expired
		g.gateNext(issX)
		tx := tok(issX)
		done := make(chan struct{})
		var px limitkey.Principal
		var ex error
		go func() { px, ex = a.verifyToken(context.Background(), tx); close(done) }()
		<-g.entered
		py := verifyOK(t, a, tok(issY)) // Y takes "shared"; X evicted to make room
		close(g.gate)
		<-done
		if ex == nil {
			t.Errorf("X accepted (%+v) for tenant %q while Y (%+v) vouches for it", px, px.Tenant, py)
		}
	})
}

// TestResolverPanicDoesNotWedgeTheIssuer: a resolver that panics (a bug in
// the caller's code) fails that verification; the issuer's next token asks
// the resolver again rather than waiting forever on a call that ended.
func TestResolverPanicDoesNotWedgeTheIssuer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		rec := IssuerRecord{Issuer: issC, Tenant: "customer-c", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
			Keys: []VerificationKey{{Key: k.edC.Public()}}}
		var calls atomic.Int64
		res := resolverFunc(func(context.Context, string) (IssuerRecord, error) {
			if calls.Add(1) == 1 {
				panic("resolver bug")
			}
			return rec, nil
		})
		a := newResolverAuth(t, bubbleNow(), &logBuffer{}, res)
		tok := mint(t, "EdDSA", k.edC, nil, baseClaims(issC))
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the resolver's panic did not reach the caller")
				}
			}()
			_, _ = a.verifyToken(context.Background(), tok)
		}()
		done := make(chan error, 1)
		go func() { _, err := a.verifyToken(context.Background(), tok); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("after the panic: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the issuer is wedged on the panicked call")
		}
	})
}

// TestResolverBoundHoldsForAnEvictedConfirmation: an issuer whose expired
// entry is evicted while the resolver answers with a changed record is new
// again, so MaxResolvedIssuers applies to it.
func TestResolverBoundHoldsForAnEvictedConfirmation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		const issX, issY = "https://x.example/", "https://y.example/"
		rec := func(iss, tenant string) IssuerRecord {
			return IssuerRecord{Issuer: iss, Tenant: tenant, Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
				Keys: []VerificationKey{{Key: k.ed.Public()}}}
		}
		g := &gatedResolver{recs: map[string]IssuerRecord{issX: rec(issX, "x"), issY: rec(issY, "y")}}
		a, tok := newGatedAuth(t, g)
		verifyOK(t, a, tok(issX))
		advance(11 * time.Minute) // X expired
		g.mu.Lock()
		g.recs[issX] = rec(issX, "x2") // changed
		g.mu.Unlock()
		g.gateNext(issX)
		done := make(chan error, 1)
		tx := tok(issX)
		go func() { _, err := a.verifyToken(context.Background(), tx); done <- err }()
		<-g.entered
		verifyOK(t, a, tok(issY)) // evicts X's expired entry to make room
		close(g.gate)
		if err := <-done; !errors.Is(err, ErrKeySourceUnavailable) {
			t.Errorf("X's changed record with Y in force and room for 1: %v; want ErrKeySourceUnavailable", err)
		}
		if n := len(a.env.resolver.entries); n > 1 {
			t.Errorf("%d resolved issuers, bound 1", n)
		}
	})
}

// TestResolverHangBoundsTheWaiters: a resolver that ignores its ctx and
// hangs keeps the request that called it waiting, but the issuer's other
// tokens wait for the shared call no longer than the resolver's timeout,
// then fail with ErrKeySourceUnavailable (503) rather than hanging too.
func TestResolverHangBoundsTheWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		const issX = "https://x.example/"
		g := &gatedResolver{recs: map[string]IssuerRecord{issX: {Issuer: issX, Tenant: "x", Audiences: []string{"api"},
			Algorithms: []string{"EdDSA"}, Keys: []VerificationKey{{Key: k.ed.Public()}}}}}
		a, tok := newGatedAuth(t, g)
		g.gateNext(issX)
		leader := make(chan error, 1)
		go func() { _, err := a.verifyToken(context.Background(), tok(issX)); leader <- err }()
		<-g.entered
		start := time.Now()
		waiter := make(chan error, 1)
		go func() { _, err := a.verifyToken(context.Background(), tok(issX)); waiter <- err }()
		err := <-waiter // the bubble's clock runs on while the resolver hangs
		if !errors.Is(err, ErrKeySourceUnavailable) {
			t.Errorf("waiter after the timeout: %v, want ErrKeySourceUnavailable", err)
		}
		if el := time.Since(start); el != a.env.jwks.timeout {
			t.Errorf("the waiter answered after %v; want the resolver's timeout, %v", el, a.env.jwks.timeout)
		}
		close(g.gate)
		if err := <-leader; err != nil {
			t.Errorf("leader after the resolver returned: %v", err)
		}
		if _, err := a.verifyToken(context.Background(), tok(issX)); err != nil {
			t.Errorf("after the resolver returned: %v", err)
		}
	})
}

// resolverFunc adapts a function to IssuerResolver.
type resolverFunc func(ctx context.Context, issuer string) (IssuerRecord, error)

func (f resolverFunc) ResolveIssuer(ctx context.Context, issuer string) (IssuerRecord, error) {
	return f(ctx, issuer)
}
