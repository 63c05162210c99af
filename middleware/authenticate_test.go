package middleware_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

func TestAuthenticateOutcomes(t *testing.T) {
	s := newStack(t, stackOptions{policies: []policy.Policy{perNetwork("1/s", 100)}})
	good := s.token("alice", "")
	parts := strings.Split(good, ".")
	forged := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
	s.now = s.now.Add(-2 * time.Hour)
	expired := s.token("alice", "")
	s.now = s.now.Add(2 * time.Hour)

	tests := []struct {
		name       string
		headers    http.Header
		wantCode   int
		wantAuthn  string
		wantType   string
		secretBits []string
	}{
		{"valid", http.Header{"Authorization": {"Bearer " + good}}, 200, "", "", nil},
		{"lower-case scheme", http.Header{"Authorization": {"bearer " + good}}, 200, "", "", nil},
		{"no credential", nil, 401, "Bearer", "urn:ratekey:problem:unauthenticated", nil},
		{"two Authorization lines", http.Header{"Authorization": {"Bearer " + good, "Bearer " + good}}, 400, `Bearer error="invalid_request"`, "urn:ratekey:problem:invalid-request", []string{good}},
		{"Basic scheme", http.Header{"Authorization": {"Basic YWxpY2U6c2VjcmV0"}}, 401, "Bearer", "urn:ratekey:problem:unauthenticated", []string{"YWxpY2U6c2VjcmV0"}},
		{"empty Authorization", http.Header{"Authorization": {""}}, 400, `Bearer error="invalid_request"`, "urn:ratekey:problem:invalid-request", nil},
		{"bad signature", http.Header{"Authorization": {"Bearer " + forged}}, 401, `Bearer error="invalid_token"`, "urn:ratekey:problem:invalid-token", []string{forged, parts[1]}},
		{"expired", http.Header{"Authorization": {"Bearer " + expired}}, 401, `Bearer error="invalid_token"`, "urn:ratekey:problem:invalid-token", []string{expired}},
		{"garbage token", http.Header{"Authorization": {"Bearer not.a.jwt"}}, 401, `Bearer error="invalid_token"`, "urn:ratekey:problem:invalid-token", []string{"not.a.jwt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1", headers: tt.headers})
			if w.Code != tt.wantCode {
				t.Fatalf("got %d, want %d: %s", w.Code, tt.wantCode, w.Body)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != tt.wantAuthn {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.wantAuthn)
			}
			if tt.wantType != "" {
				if p := decodeProblem(t, w.Body.String()); p.Type != tt.wantType {
					t.Errorf("type = %q, want %q", p.Type, tt.wantType)
				}
			}
			for _, secret := range tt.secretBits {
				if strings.Contains(w.Body.String(), secret) || strings.Contains(strings.Join(w.Header().Values("WWW-Authenticate"), " "), secret) {
					t.Errorf("response leaks the credential: %s", w.Body)
				}
			}
		})
	}
}

func TestInvalidTokenNeverBecomesAnonymous(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{perNetwork("1/s", 100)}})
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"}); w.Code != 200 {
		t.Fatalf("anonymous: %d", w.Code)
	}
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1", token: "x.y.z"}); w.Code != 401 {
		t.Fatalf("invalid token with anonymous allowed: %d, want 401", w.Code)
	}
	basic := http.Header{"Authorization": {"Basic YWxpY2U6c2VjcmV0"}}
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1", headers: basic}); w.Code != 401 || w.Header().Get("WWW-Authenticate") != "Bearer" {
		t.Fatalf("Basic credential with anonymous allowed: %d %q, want 401 Bearer", w.Code, w.Header().Get("WWW-Authenticate"))
	}
}

// authFunc adapts a function to identity.Authenticator.
type authFunc func(r *http.Request) (limitkey.Principal, error)

func (f authFunc) Authenticate(r *http.Request) (limitkey.Principal, error) {
	return f(r)
}

// requestAuth is an identity.Authenticator that reads the query.
type requestAuth struct{}

func (requestAuth) Authenticate(r *http.Request) (limitkey.Principal, error) {
	if r.URL.Query().Get("who") == "" {
		return limitkey.Principal{}, identity.ErrNoCredential
	}
	return limitkey.Principal{Tenant: "t", Account: r.URL.Query().Get("who"), Method: limitkey.MethodAPIKey}, nil
}

func serveAuth(a identity.Authenticator, opts middleware.AuthOptions, target string) *httptest.ResponseRecorder {
	h := middleware.Authenticate(a, opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := middleware.PrincipalFrom(r.Context())
		_, _ = io.WriteString(w, p.Account)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
	return w
}

// TestAuthenticateKeySourceUnavailable: an error wrapping
// identity.ErrKeySourceUnavailable is 503 with Retry-After and no challenge,
// never 401 and never anonymous.
func TestAuthenticateKeySourceUnavailable(t *testing.T) {
	down := authFunc(func(*http.Request) (limitkey.Principal, error) {
		return limitkey.Principal{}, fmt.Errorf("identity: issuer %q: %w", "x", identity.ErrKeySourceUnavailable)
	})
	for _, anon := range []bool{false, true} {
		w := serveAuth(down, middleware.AuthOptions{Anonymous: anon}, "/")
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || w.Header().Get("WWW-Authenticate") != "" {
			t.Fatalf("anonymous=%v: %d %v", anon, w.Code, w.Header())
		}
		if p := decodeProblem(t, w.Body.String()); p.Type != "urn:ratekey:problem:key-source-unavailable" {
			t.Fatalf("type = %q", p.Type)
		}
	}
}

// TestAuthenticateWholeRequest: an authenticator gets the whole request
// (its query string here), not only its headers.
func TestAuthenticateWholeRequest(t *testing.T) {
	a := requestAuth{}
	if w := serveAuth(a, middleware.AuthOptions{}, "/?who=alice"); w.Code != 200 || w.Body.String() != "alice" {
		t.Fatalf("%d %q", w.Code, w.Body)
	}
	if w := serveAuth(a, middleware.AuthOptions{}, "/"); w.Code != 401 || w.Header().Get("WWW-Authenticate") != "Bearer" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
}
