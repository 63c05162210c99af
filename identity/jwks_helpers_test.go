package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/servertest"
	"github.com/ratekey/ratekey/limitkey"
)

// fakeClock is a manually advanced clock whose timers fire on Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	c    chan time.Time
	dead bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: testNow} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t.c, func() {
		c.mu.Lock()
		t.dead = true
		c.mu.Unlock()
	}
}

// Advance moves the clock and fires every timer now due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	live := c.timers[:0]
	for _, t := range c.timers {
		if t.dead {
			continue
		}
		if !t.at.After(c.now) {
			t.c <- c.now
			t.dead = true
			continue
		}
		live = append(live, t)
	}
	c.timers = live
}

// pending counts live timers.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.dead {
			n++
		}
	}
	return n
}

// waitPending waits until at least n timers are live (the refresh loops
// are parked), so that an Advance is seen by them.
func (c *fakeClock) waitPending(tb testing.TB, n int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.pending() < n {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %d pending timers (have %d)", n, c.pending())
		}
		time.Sleep(time.Millisecond)
	}
}

// jwksServer serves a mutable JWK Set and counts requests.
type jwksServer struct {
	*httptest.Server
	mu     sync.Mutex
	body   []byte
	status int
	block  chan struct{} // non-nil: requests wait for it to close
	hits   atomic.Int64
}

func newJWKSServer(tb testing.TB, keys ...obj) *jwksServer {
	tb.Helper()
	s := &jwksServer{status: http.StatusOK}
	s.setKeys(keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		body, status, block := s.body, s.status, s.block
		s.mu.Unlock()
		if block != nil {
			select {
			case <-block:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	tb.Cleanup(func() {
		s.mu.Lock()
		if s.block != nil {
			close(s.block)
			s.block = nil
		}
		s.mu.Unlock()
		s.Close()
	})
	return s
}

func (s *jwksServer) setKeys(keys ...obj) {
	list := make([]any, len(keys))
	for i, k := range keys {
		list[i] = map[string]any(k)
	}
	s.setBody(must(json.Marshal(map[string]any{"keys": list})))
}

func (s *jwksServer) setBody(b []byte) {
	s.mu.Lock()
	s.body = b
	s.mu.Unlock()
}

func (s *jwksServer) setStatus(code int) {
	s.mu.Lock()
	s.status = code
	s.mu.Unlock()
}

// hold makes requests wait until the returned function is called.
func (s *jwksServer) hold() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.block = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.block == ch {
				s.block = nil
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

// jwk returns the public JWK of key with kid and alg ("" omits them).
func jwk(kid, alg string, pub any) obj {
	var o obj
	switch k := pub.(type) {
	case ed25519.PublicKey:
		o = obj{"kty": "OKP", "crv": "Ed25519", "x": b64.EncodeToString(k)}
	case *ecdsa.PublicKey:
		pt := must(k.Bytes())
		n := (len(pt) - 1) / 2
		o = obj{"kty": "EC", "crv": k.Curve.Params().Name, "x": b64.EncodeToString(pt[1 : 1+n]), "y": b64.EncodeToString(pt[1+n:])}
	case *rsa.PublicKey:
		o = obj{"kty": "RSA", "n": b64.EncodeToString(k.N.Bytes()), "e": b64.EncodeToString(big.NewInt(int64(k.E)).Bytes())}
	case []byte:
		o = obj{"kty": "oct", "k": b64.EncodeToString(k)}
	default:
		panic("unsupported key")
	}
	if kid != "" {
		o["kid"] = kid
	}
	if alg != "" {
		o["alg"] = alg
	}
	return o
}

// logBuffer is a concurrency-safe slog sink whose text the secrets scans read.
type logBuffer struct{ servertest.Buffer }

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// jwksRecord is an issuer record over srv with a fixed tenant.
func jwksRecord(iss, tenant string, srv *jwksServer, algs ...string) IssuerRecord {
	return IssuerRecord{Issuer: iss, Tenant: tenant, Audiences: []string{"api"}, Algorithms: algs, JWKSURL: srv.URL + "/jwks.json"}
}

// newJWKSAuth builds an authenticator on the fake clock with short request
// waits; it is closed when the test ends.
func newJWKSAuth(tb testing.TB, clk *fakeClock, logs io.Writer, opts JWKSOptions, recs ...IssuerRecord) *JWTAuthenticator {
	tb.Helper()
	if opts.MissWait == 0 {
		opts.MissWait = 5 * time.Second // generous: only a hung fetch reaches it
	}
	if logs == nil {
		logs = io.Discard
	}
	a, err := NewJWTAuthenticator(JWTConfig{Issuers: recs, Now: clk.Now, clock: clk, JWKS: opts,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		tb.Fatalf("NewJWTAuthenticator: %v", err)
	}
	tb.Cleanup(func() { _ = a.Close() })
	return a
}

// set returns the key set of a JWKS record.
func (a *JWTAuthenticator) set(iss string) *jwksSet { return a.issuers[iss].jwks }

// waitAttempts waits until n fetch attempts have completed.
func (s *jwksSet) waitAttempts(tb testing.TB, n int) {
	tb.Helper()
	deadline := time.After(5 * time.Second)
	for {
		s.mu.Lock()
		got, ch := s.attempts, s.done
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			tb.Fatalf("timed out waiting for %d fetch attempts (have %d)", n, got)
		}
	}
}

// verifyOK fails the test unless tok verifies.
func verifyOK(tb testing.TB, a *JWTAuthenticator, tok string) limitkey.Principal {
	tb.Helper()
	p, err := a.verifyToken(context.Background(), tok)
	if err != nil {
		tb.Fatalf("verifyToken: %v", err)
	}
	return p
}

// verifyDesc fails the test unless tok fails with the description desc
// ("503" means ErrKeySourceUnavailable).
func verifyDesc(tb testing.TB, a *JWTAuthenticator, tok, desc string) {
	tb.Helper()
	_, err := a.verifyToken(context.Background(), tok)
	if desc == "503" {
		if err == nil || !isUnavailable(err) {
			tb.Fatalf("err = %v, want ErrKeySourceUnavailable", err)
		}
		return
	}
	ae, ok := err.(*AuthError)
	if !ok || ae.Description != desc {
		tb.Fatalf("err = %v, want invalid_token %q", err, desc)
	}
}

func isUnavailable(err error) bool { return errors.Is(err, ErrKeySourceUnavailable) }
