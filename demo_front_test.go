package ratekey_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/internal/logtest"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/trustedproxy"
)

// TestNewWithTheCallersResolver: Config.Resolver is the chain's, so that a
// refresh of its file sources changes whom Handler trusts; New refuses it
// beside Proxies.
func TestNewWithTheCallersResolver(t *testing.T) {
	file := filepath.Join(t.TempDir(), "proxies.txt")
	if err := os.WriteFile(file, []byte("10.9.9.9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := trustedproxy.New(trustedproxy.Config{Rules: []trustedproxy.Rule{{Sources: []trustedproxy.Source{trustedproxy.FileSource{Path: file}}, Header: "X-Forwarded-For"}}})
	if err != nil {
		t.Fatal(err)
	}
	policies := []ratekey.Policy{{Name: "p", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: perMinute(1, 1)}}
	_, err = ratekey.New(ratekey.Config{Router: chi.NewRouter(), Resolver: res, Policies: policies,
		Proxies: trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"10.0.0.1"}, Header: "X-Real-IP"}}}})
	if err == nil || err.Error() != "resolver: set Resolver or Proxies, not both (Resolver is built from a trustedproxy.Config already)" {
		t.Errorf("New with Resolver and Proxies: %v; want a refusal", err)
	}
	r := chi.NewRouter()
	m, err := ratekey.New(ratekey.Config{Router: r, Resolver: res, Policies: policies})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(m.Handler)
	r.Get("/x", func(http.ResponseWriter, *http.Request) {})
	client := func(peer string) string {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.RemoteAddr, req.Header["X-Forwarded-For"] = peer+":1234", []string{"203.0.113.7"}
		if c := m.Check(req).Client; c != nil {
			return *c
		}
		return ""
	}
	if got := client("10.9.9.9"); got != "203.0.113.7" {
		t.Errorf("client behind the file's proxy: %q; want 203.0.113.7", got)
	}
	if err := os.WriteFile(file, []byte("10.8.8.8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := res.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, now := client("10.9.9.9"), client("10.8.8.8"); got != "10.9.9.9" || now != "203.0.113.7" {
		t.Errorf("after the refresh: %q behind the old proxy (want the proxy itself), %q behind the new one (want 203.0.113.7)", got, now)
	}
}

// TestDebugLimitedScopesTheDebugEndpointOnly: a route DebugLimited excludes
// is shown unlimited and unauthenticated by Debug, while Check still
// describes it as Handler would decide it.
func TestDebugLimitedScopesTheDebugEndpointOnly(t *testing.T) {
	r := chi.NewRouter()
	m, err := ratekey.New(ratekey.Config{Router: r, DebugAllow: []string{"192.0.2.0/24"},
		DebugLimited: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/v1/") },
		Policies:     []ratekey.Policy{{Name: "p", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: perMinute(1, 1)}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("/debug", m.Debug())
	r.With(m.Handler).Get("/v1/x", func(http.ResponseWriter, *http.Request) {})
	r.Get("/healthz", func(http.ResponseWriter, *http.Request) {})
	for _, tc := range []struct {
		path    string
		limited bool
		auth    string
	}{{"/v1/x", true, "not_configured"}, {"/healthz", false, "not_configured"}} {
		req := httptest.NewRequest(http.MethodPost, "/debug", strings.NewReader(`{"peer":"198.51.100.7:1234","method":"GET","path":"`+tc.path+`"}`))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		var rec struct {
			Limited        bool `json:"limited"`
			Authentication struct {
				Outcome string `json:"outcome"`
			} `json:"authentication"`
			Policies []any `json:"policies"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &rec); err != nil {
			t.Fatalf("%s: %d %s", tc.path, w.Code, w.Body)
		}
		if rec.Limited != tc.limited || rec.Authentication.Outcome != tc.auth || (len(rec.Policies) == 1) != tc.limited {
			t.Errorf("debug of %s (%d %s): limited %v, authentication %q, %d policies; want %v, %q", tc.path, w.Code, w.Body, rec.Limited, rec.Authentication.Outcome, len(rec.Policies), tc.limited, tc.auth)
		}
	}
	if rec := m.Check(httptest.NewRequest(http.MethodGet, "/healthz", nil)); !rec.Limited || len(rec.Policies) != 1 {
		t.Errorf("Check of /healthz: limited %v, %d policies; want Handler's decision (DebugLimited is the endpoint's)", rec.Limited, len(rec.Policies))
	}
}

// TestFlushLogWritesTheSummaries: the bounded log's counts of an interval
// under way are written by FlushLog, not held until the interval ends.
func TestFlushLogWritesTheSummaries(t *testing.T) {
	var logs logtest.Lines
	r := chi.NewRouter()
	m, err := ratekey.New(ratekey.Config{Router: r, Logger: slog.New(&logs), LogInterval: 3600e9,
		Policies: []ratekey.Policy{{Name: "p", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: perMinute(1, 1)}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(m.Handler)
	r.Get("/x", func(http.ResponseWriter, *http.Request) {})
	for range 5 {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil))
	}
	before := len(logs.Get())
	m.FlushLog()
	got := logs.Get()
	if len(got) <= before || !strings.Contains(strings.Join(got[before:], "\n"), "ratekey decisions summarised") {
		t.Errorf("FlushLog wrote %q after %d lines; want the interval's summary", got[before:], before)
	}
}
