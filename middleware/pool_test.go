package middleware_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// headerAuth vouches for the account named by the X-Test-Account header.
type headerAuth struct{}

func (headerAuth) Authenticate(r *http.Request) (limitkey.Principal, error) {
	a := r.Header.Get("X-Test-Account")
	if a == "" {
		return limitkey.Principal{}, identity.ErrNoCredential
	}
	return limitkey.Principal{Issuer: "test", Tenant: "acme", Account: a, Method: limitkey.MethodJWT}, nil
}

// keyLog is a limiter that keeps every key it is given, as a store that
// writes them somewhere may.
type keyLog struct {
	limiter.Limiter
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	l.mu.Lock()
	for _, r := range reqs {
		l.keys = append(l.keys, r.Key)
	}
	l.mu.Unlock()
	return l.Limiter.Take(ctx, dst, reqs)
}

// seenRequest is what one request left behind, as its handler saw it.
type seenRequest struct {
	account string
	header  http.Header // the response header map itself
	copied  http.Header // a deep copy taken in the handler
	record  *middleware.Record
	keys    []string // as the Record held them in the handler
}

// TestPooledMemoryCarriesNothingBetweenRequests: requests of different
// accounts, one after another, each see only their own principal, keys and
// response fields, and nothing handed out for one request (response field
// values, keys given to the limiter, the Record, log lines) changes when
// later requests reuse the rate limiter's pooled working memory.
func TestPooledMemoryCarriesNothingBetweenRequests(t *testing.T) {
	res := proxyResolver(t)
	lim := &keyLog{Limiter: memory.New(memory.Options{})}
	var logs strings.Builder
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Operation: middleware.RouteOperation(r),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), SamplePassed: 1, DecisionHeader: true,
		Policies: []policy.Policy{
			perNetwork("1000/s", 1000),
			{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}, Limit: limit("1000/s", 1000), OnMissing: policy.OnMissingSkip},
		}})
	if err != nil {
		t.Fatal(err)
	}
	var seen []*seenRequest
	r.Use(middleware.Recorder, middleware.ClientAddress(res, middleware.ClientAddressOptions{}), middleware.Authenticate(headerAuth{}, middleware.AuthOptions{Anonymous: true}), rl.Handler)
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		s := seen[len(seen)-1]
		s.header, s.copied = w.Header(), w.Header().Clone()
		s.record = middleware.RecordFrom(r.Context())
		for _, p := range s.record.Policies {
			if p.Key != "" {
				s.keys = append(s.keys, strings.Clone(p.Key))
			}
		}
		if p, _ := middleware.PrincipalFrom(r.Context()); p.Account != s.account {
			t.Errorf("request of %q: principal %+v", s.account, p)
		}
	})
	accounts := []string{"alice", "bob", "", "carol", "alice", ""}
	for i, a := range accounts {
		seen = append(seen, &seenRequest{account: a})
		req := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
		req.RemoteAddr = "10.0.0.1:1"
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		if a != "" {
			req.Header.Set("X-Test-Account", a)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, w.Code)
		}
	}
	for i, s := range seen {
		if !maps.EqualFunc(s.header, s.copied, slices.Equal) {
			t.Errorf("request %d: response fields changed after later requests:\nnow  %v\nthen %v", i, s.header, s.copied)
		}
		var keys []string
		for _, p := range s.record.Policies {
			if p.Key != "" {
				keys = append(keys, p.Key)
			}
		}
		if !slices.Equal(keys, s.keys) {
			t.Errorf("request %d: Record keys changed after later requests: %q, then %q", i, keys, s.keys)
		}
		want := []string{fmt.Sprintf("per-network|network=198.51.100.%d/32", i+1)}
		if s.account != "" {
			want = append(want, "per-account|tenant=acme|account="+s.account)
		}
		if !slices.Equal(s.keys, want) {
			t.Errorf("request %d (%q): keys %q, want %q", i, s.account, s.keys, want)
		}
		if s.record.Principal != nil && s.record.Principal.Account != s.account || s.record.Principal == nil && s.account != "" {
			t.Errorf("request %d (%q): Record principal %+v", i, s.account, s.record.Principal)
		}
	}
	var all []string
	for _, s := range seen {
		all = append(all, s.keys...)
	}
	if !slices.Equal(lim.keys, all) {
		t.Errorf("keys the limiter kept changed after later requests:\n%q\nwant %q", lim.keys, all)
	}
	// One line per policy decided (passes are sampled), each naming the
	// key of its own request.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != len(all) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(all), logs.String())
	}
	for i, l := range lines {
		if !strings.Contains(l, fmt.Sprintf("key=%q", all[i])) {
			t.Errorf("log line %d lacks key %q:\n%s", i, all[i], l)
		}
	}
}

// TestConcurrentEvaluationsOfOneRequest: a handler that runs the rate
// limiter on one request from several goroutines at once gets complete,
// uncorrupted response fields and keys in each (the request's arena goes
// to one evaluation at a time; the others get their own).
func TestConcurrentEvaluationsOfOneRequest(t *testing.T) {
	res := proxyResolver(t)
	lim := &keyLog{Limiter: memory.New(memory.Options{})}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{
			perNetwork("1000/s", 1000),
			{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}, Limit: limit("1000/s", 1000)},
		}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var fields [n]http.Header
	inner := rl.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r.Use(middleware.ClientAddress(res, middleware.ClientAddressOptions{}), middleware.Authenticate(headerAuth{}, middleware.AuthOptions{}))
	r.Get("/v1/reports/{id}", func(_ http.ResponseWriter, r *http.Request) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				w := httptest.NewRecorder()
				inner.ServeHTTP(w, r)
				fields[i] = w.Header()
			})
		}
		wg.Wait()
	})
	req := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	req.RemoteAddr = "10.0.0.1:1"
	req.Header.Set("X-Forwarded-For", "198.51.100.1")
	req.Header.Set("X-Test-Account", "alice")
	r.ServeHTTP(httptest.NewRecorder(), req)
	for i, h := range fields {
		if got := h.Values("RateLimit-Policy"); len(got) != 1 || got[0] != `"per-network";q=1000;w=1, "per-account";q=1000;w=1` {
			t.Errorf("evaluation %d: RateLimit-Policy %q", i, got)
		}
		if got := h.Values("RateLimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"per-network";r=`) || !strings.Contains(got[0], `, "per-account";r=`) {
			t.Errorf("evaluation %d: RateLimit %q", i, got)
		}
	}
	if len(lim.keys) != 2*n {
		t.Fatalf("%d keys reached the limiter, want %d", len(lim.keys), 2*n)
	}
	for i, k := range lim.keys {
		if want := []string{"per-network|network=198.51.100.1/32", "per-account|tenant=acme|account=alice"}[i%2]; k != want {
			t.Errorf("key %d: %q, want %q", i, k, want)
		}
	}
}
