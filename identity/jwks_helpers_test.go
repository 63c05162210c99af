package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekey/ratekey/internal/servertest"
	"github.com/ratekey/ratekey/limitkey"
)

// The JWK Set tests run in testing/synctest bubbles: the refresh loops'
// timers and the request waits run on the bubble's clock, which jumps
// ahead whenever every goroutine of the bubble is blocked; JWTConfig.Now
// is bubbleNow, the same clock moved to testNow. The key servers are
// in-process (jwksServer, reached through jwksClient): a socket is not a
// wait the bubble can see through.

// bubbleNow returns a time source that reads testNow when it is called
// and then moves with the clock of the caller's bubble.
func bubbleNow() func() time.Time {
	start := time.Now()
	return func() time.Time { return testNow.Add(time.Since(start)) }
}

// fixedNow is the time source of a test that does not move its clock.
func fixedNow() time.Time { return testNow }

// advance moves the bubble's clock by d, firing the timers due by then,
// and waits until every other goroutine of the bubble is blocked again
// (the refresh loops parked, their fetches done).
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// jwksServer serves a mutable JWK Set in process and counts requests. Its
// URL names a loopback host of its own, which jwksClient routes to it.
type jwksServer struct {
	URL    string
	mu     sync.Mutex
	body   []byte
	status int
	block  chan struct{} // non-nil: requests wait for it to close
	hits   atomic.Int64
}

var (
	jwksServers   sync.Map // host → *jwksServer
	jwksNextPort  atomic.Int32
	jwksTransport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		s, ok := jwksServers.Load(r.URL.Host)
		if !ok {
			return nil, errors.New("no in-process server at " + r.URL.Host)
		}
		if err := r.Context().Err(); err != nil {
			return nil, err
		}
		rec := httptest.NewRecorder()
		s.(*jwksServer).ServeHTTP(rec, r)
		if err := r.Context().Err(); err != nil {
			return nil, err // the client gave up while the server held the request
		}
		resp := rec.Result()
		resp.Request = r
		return resp, nil
	})
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// jwksClient is the default JWK Set client (timeout, no redirects) over
// the in-process servers.
func jwksClient(timeout time.Duration) *http.Client {
	if timeout == 0 {
		timeout = defaultJWKSTimeout
	}
	c := defaultJWKSClient(timeout)
	c.Transport = jwksTransport
	return c
}

func newJWKSServer(tb testing.TB, keys ...obj) *jwksServer {
	tb.Helper()
	host := fmt.Sprintf("127.0.0.1:%d", 10000+jwksNextPort.Add(1))
	s := &jwksServer{URL: "http://" + host, status: http.StatusOK}
	s.setKeys(keys...)
	jwksServers.Store(host, s)
	tb.Cleanup(func() {
		s.mu.Lock()
		if s.block != nil {
			close(s.block)
			s.block = nil
		}
		s.mu.Unlock()
		jwksServers.Delete(host)
	})
	return s
}

// ServeHTTP answers with the current set and status, after the hold, if
// any, is released (or the request is cancelled).
func (s *jwksServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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

// newJWKSAuth builds an authenticator on the time source now, fetching
// from the in-process servers, with short request waits; it is closed when
// the test ends.
func newJWKSAuth(tb testing.TB, now func() time.Time, logs io.Writer, opts JWKSOptions, recs ...IssuerRecord) *JWTAuthenticator {
	tb.Helper()
	opts.Client = jwksClient(opts.Timeout)
	return newNetJWKSAuth(tb, now, logs, opts, recs...)
}

// newNetJWKSAuth is newJWKSAuth with opts.Client as given (nil: the
// default client, over the network).
func newNetJWKSAuth(tb testing.TB, now func() time.Time, logs io.Writer, opts JWKSOptions, recs ...IssuerRecord) *JWTAuthenticator {
	tb.Helper()
	if opts.MissWait == 0 {
		opts.MissWait = 5 * time.Second // generous: only a hung fetch reaches it
	}
	if logs == nil {
		logs = io.Discard
	}
	a, err := NewJWTAuthenticator(JWTConfig{Issuers: recs, Now: now, JWKS: opts,
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
