package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/workload"
	"github.com/ratekey/ratekey/middleware"
)

// The demo's resource: 8 requests at once, 20 ms each (units=1).
const (
	capacity = 8
	unit     = 20 * time.Millisecond
)

// stack is a system under test, in this process: GET /v1/work on the
// demo's resource behind ratekey (ClientAddress, a JWT authenticator whose
// tokens carry a plan, and the policy given), or behind nothing.
type stack struct {
	h      http.Handler
	res    *workload.Resource
	limits *limitLog
	tokens [2]string // a token per class: plan free (sheddable), plan pro (critical)
}

// benchSecret signs the stack's tokens (HS256; the bench's own, never a
// real key).
var benchSecret = []byte("ratekey-bench-overload-hs256-secret-32b")

// newStack returns the stack, with policy p in front of the resource or,
// when p is nil, nothing (the resource queues without bound but its own).
func newStack(p *ratekey.Policy) (*stack, error) {
	s := &stack{res: workload.NewResource(capacity, capacity, unit, 1<<20), limits: &limitLog{start: time.Now()}}
	work := func(w http.ResponseWriter, r *http.Request) {
		if err := s.res.Work(r.Context(), 1); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	for c, plan := range []string{"free", "pro"} {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "https://bench.invalid", "aud": "bench",
			"sub": plan + "-user", "plan": plan, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(benchSecret)
		if err != nil {
			return nil, err
		}
		s.tokens[c] = tok
	}
	r := chi.NewRouter()
	if p == nil {
		r.Get("/v1/work", work)
		s.h = r
		return s, nil
	}
	auth, err := identity.NewJWTAuthenticator(identity.JWTConfig{Issuers: []identity.IssuerRecord{{
		Issuer: "https://bench.invalid", Tenant: "bench", Audiences: []string{"bench"}, Algorithms: []string{"HS256"},
		PlanClaim: "plan", Plans: []string{"free", "pro"}, Keys: []identity.VerificationKey{{KID: "", Key: benchSecret}}}}})
	if err != nil {
		return nil, err
	}
	mw, err := ratekey.New(ratekey.Config{Router: r, Authenticator: auth, Policies: []ratekey.Policy{*p},
		Metrics: s.limits, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	r.Use(mw.Handler)
	r.Get("/v1/work", work)
	s.h = r
	return s, nil
}

// local sends a request of the class to the stack in this process.
func (s *stack) local(_ context.Context, class int) int {
	req := httptest.NewRequest(http.MethodGet, "/v1/work", nil)
	req.RemoteAddr = "192.0.2.1:1000"
	req.Header.Set("Authorization", "Bearer "+s.tokens[class])
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, req)
	return w.Code
}

// report is one window's report of an adaptive cap: when (since the
// stack was made), the limit from then on, and the latency estimates.
type report struct {
	t                 time.Duration
	limit             int64
	baseline, latency time.Duration
}

// limitLog is a middleware.Metrics that keeps the adaptive cap's reports.
type limitLog struct {
	mu      sync.Mutex
	start   time.Time
	reports []report
}

var _ middleware.Metrics = (*limitLog)(nil)

func (l *limitLog) Adaptive(_, _ string, limit int64, baseline, latency time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reports = append(l.reports, report{time.Since(l.start), limit, baseline, latency})
}

// since returns the reports made from t0 on, timed from t0.
func (l *limitLog) since(t0 time.Time) []report {
	l.mu.Lock()
	defer l.mu.Unlock()
	off := t0.Sub(l.start)
	var out []report
	for _, r := range l.reports {
		if r.t >= off {
			r.t -= off
			out = append(out, r)
		}
	}
	return out
}

func (*limitLog) Decision(string, string)                        {}
func (*limitLog) JWKSFetch(string, error)                        {}
func (*limitLog) StoreCall(string, string, time.Duration, error) {}
func (*limitLog) FailOpen(string)                                {}
func (*limitLog) Fallback(string)                                {}
func (*limitLog) CachedRejection(string)                         {}
func (*limitLog) InFlight(string, int)                           {}
func (*limitLog) ProxyAnomaly(string)                            {}
func (*limitLog) AuthFailure(string)                             {}
func (*limitLog) Queued(string)                                  {}
func (*limitLog) Dequeued(string, time.Duration, bool)           {}

// Settled counts the settled costs of reserve-then-settle policies (issue
// 27); no policy of this bench settles.
func (*limitLog) Settled(string, int64, bool) {}
