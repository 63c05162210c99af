package middleware_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/middleware"
)

func TestAuthenticateOutcomes(t *testing.T) {
	s := newStack(t, stackOptions{policies: []middleware.Policy{perNetwork("1/s", 100)}})
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
		{"no credential", nil, 401, "Bearer", middleware.ProblemUnauthenticated, nil},
		{"two Authorization lines", http.Header{"Authorization": {"Bearer " + good, "Bearer " + good}}, 400, `Bearer error="invalid_request"`, middleware.ProblemInvalidRequest, []string{good}},
		{"Basic scheme", http.Header{"Authorization": {"Basic YWxpY2U6c2VjcmV0"}}, 401, "Bearer", middleware.ProblemUnauthenticated, []string{"YWxpY2U6c2VjcmV0"}},
		{"empty Authorization", http.Header{"Authorization": {""}}, 400, `Bearer error="invalid_request"`, middleware.ProblemInvalidRequest, nil},
		{"bad signature", http.Header{"Authorization": {"Bearer " + forged}}, 401, `Bearer error="invalid_token"`, middleware.ProblemInvalidToken, []string{forged, parts[1]}},
		{"expired", http.Header{"Authorization": {"Bearer " + expired}}, 401, `Bearer error="invalid_token"`, middleware.ProblemInvalidToken, []string{expired}},
		{"garbage token", http.Header{"Authorization": {"Bearer not.a.jwt"}}, 401, `Bearer error="invalid_token"`, middleware.ProblemInvalidToken, []string{"not.a.jwt"}},
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
	s := newStack(t, stackOptions{anonymous: true, policies: []middleware.Policy{perNetwork("1/s", 100)}})
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
