package bench

import (
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
	"github.com/go-chi/jwtauth/v5"
	gojwt "github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v2/jwt"
)

// The peer stack: what a user assembles from chi's ecosystem instead of
// ratekey, doing the chain workload's work with the same inputs and the
// same trust:
//
//   - client address: chi v5.5.0 middleware.ClientIPFromXFF, trusting the
//     chain's proxies (127.0.0.1 and 10.0.0.0/8, as chainProxies): it
//     checks the TCP peer first, walks X-Forwarded-For right to left, skips
//     trusted hops and stores the first untrusted address in the context;
//   - authentication: go-chi/jwtauth v5.3.3 (lestrrat-go/jwx v2) verifying
//     the same ES256 token with the same public key, issuer, audience and
//     required exp (jwtauth.Verifier then jwtauth.Authenticator: 401 for a
//     missing or invalid token, as the chain does without Anonymous).
//     jwtauth has no verification cache: every request pays a full ES256
//     verification, which is what a user of this stack gets;
//   - limits: go-chi/httprate v0.16.1, the same two policies as
//     chainPolicies and the same limit (chainLimit: never rejects): one
//     per network (httprate.LimitBy keyed by httprate.CanonicalizeIP of
//     the client address, IPv6 by its /64, as httprate's documentation
//     pairs it with ClientIPFromXFF), mounted on the /v1 sub-router before
//     authentication; one per account and operation (the token's subject
//     and the chi route template, "GET /v1/reports/{id}"), mounted on the
//     route with With, where chi knows the template (in a sub-router's Use
//     it does not yet: the route is matched after the middleware runs).
//
// The per-account key leaves out the tenant: the workload has one issuer,
// so ratekey's tenant part is the same constant on every request.
const peerLeeway = 30 * time.Second // identity's default JWT leeway

// newPeerStack returns the chain workload's router (the /v1 sub-router,
// GET /reports/{id} answering 200) behind the peer stack, verifying tokens
// signed by k and limiting with lim per window. With anonymous, the stack
// has no authentication and no per-account limit (the client address and
// the per-network limit only): the counterpart of ratekey's front door
// serving anonymous requests, which skips the account policy.
func newPeerStack(tb testing.TB, k jwtKey, lim rateBurst, anonymous bool) http.Handler {
	tb.Helper()
	ja := jwtauth.New(k.alg, nil, k.pub,
		jwt.WithIssuer(benchIssuer), jwt.WithAudience("api"),
		jwt.WithRequiredClaim("exp"), jwt.WithAcceptableSkew(peerLeeway))
	// httprate counts requests in a sliding window and has no separate
	// burst: Burst requests per window, the window being the time the
	// bucket takes to refill (as in the keyed workloads).
	perNetwork := httprate.LimitBy(lim.Burst, lim.window(), peerNetworkKey)
	perAccount := httprate.LimitBy(lim.Burst, lim.window(), httprate.JoinKeys(peerAccountKey, peerOperationKey))
	r := chi.NewRouter()
	r.Route("/v1", func(v chi.Router) {
		v.Use(chimw.ClientIPFromXFF("127.0.0.1/32", "10.0.0.0/8"), perNetwork)
		if anonymous {
			v.Get("/reports/{id}", okHandler)
			return
		}
		v.Use(jwtauth.Verifier(ja), jwtauth.Authenticator(ja))
		v.With(perAccount).Get("/reports/{id}", okHandler)
	})
	return r
}

// peerNetworkKey is the per-network policy's key: the client address that
// ClientIPFromXFF stored, IPv6 masked to its /64 (httprate's documented
// pairing).
func peerNetworkKey(r *http.Request) (string, error) {
	return httprate.CanonicalizeIP(chimw.GetClientIP(r.Context())), nil
}

// peerAccountKey is the verified token's subject, read from the token
// jwtauth.Verifier stored (jwtauth.FromContext would also copy every claim
// into a map on each call).
func peerAccountKey(r *http.Request) (string, error) {
	t, _ := r.Context().Value(jwtauth.TokenCtxKey).(jwt.Token)
	if t == nil {
		return "", errPeerNoToken
	}
	return t.Subject(), nil
}

// peerOperationKey is the operation: the method and the chi route template
// that serves the request.
func peerOperationKey(r *http.Request) (string, error) {
	return r.Method + " " + chi.RouteContext(r.Context()).RoutePattern(), nil
}

type peerError string

func (e peerError) Error() string { return string(e) }

// errPeerNoToken is a per-account key asked for without a verified token
// (jwtauth.Authenticator in front makes it unreachable).
const errPeerNoToken = peerError("no verified token in the context")

// TestPeerStack pins what the peer stack does, so that it is a like-for-like
// contender: the client address from a trusted proxy's X-Forwarded-For only,
// the same ES256 token verified (a token signed by another key, an expired
// one, a wrong audience and a missing one answer 401), and two limits, one
// per client network and one per account and route template (not per raw
// path, not per client). Each policy admits 2 requests per hour; the steps
// run in order on one router.
func TestPeerStack(t *testing.T) {
	k, other := newJWTKey(t, "ES256"), newJWTKey(t, "ES256")
	alice, bob, carol := k.mint(t, "alice", 1), k.mint(t, "bob", 2), k.mint(t, "carol", 3)
	expired := mintClaims(t, k, gojwt.MapClaims{"iss": benchIssuer, "sub": "alice", "aud": "api", "exp": time.Now().Add(-time.Hour).Unix()})
	wrongAud := mintClaims(t, k, gojwt.MapClaims{"iss": benchIssuer, "sub": "alice", "aud": "web", "exp": time.Now().Add(time.Hour).Unix()})
	noExp := mintClaims(t, k, gojwt.MapClaims{"iss": benchIssuer, "sub": "alice", "aud": "api"})
	h := newPeerStack(t, k, rateBurst{Rate: 2, Burst: 2, Per: time.Hour}, false)
	steps := []struct {
		name, peer, xff, token, path string
		want                         int
	}{
		{"alice from client 1", "10.0.0.1:1", "198.51.0.1, 10.0.0.2", alice, "/v1/reports/1", 200},
		{"alice, another id, client 2", "10.0.0.1:1", "198.51.0.2", alice, "/v1/reports/2", 200},
		{"alice's account and operation spent, a third id, client 3", "10.0.0.1:1", "198.51.0.3", alice, "/v1/reports/3", 429},
		{"bob from client 1 (its second request: admitted)", "10.0.0.1:1", "198.51.0.1", bob, "/v1/reports/1", 200},
		{"bob from client 1 again: the network is spent", "10.0.0.1:1", "198.51.0.1", bob, "/v1/reports/4", 429},
		{"client 1 spoofing from an untrusted peer is the peer", "192.0.2.7:1", "198.51.0.1", carol, "/v1/reports/5", 200},
		{"a forged XFF hop left of the client is not believed", "10.0.0.1:1", "198.51.0.1, 198.51.0.4", carol, "/v1/reports/6", 200},
		{"token signed by another key", "10.0.0.1:1", "198.51.1.1", other.mint(t, "alice", 4), "/v1/reports/1", 401},
		{"expired token", "10.0.0.1:1", "198.51.1.2", expired, "/v1/reports/1", 401},
		{"wrong audience", "10.0.0.1:1", "198.51.1.3", wrongAud, "/v1/reports/1", 401},
		{"no exp", "10.0.0.1:1", "198.51.1.4", noExp, "/v1/reports/1", 401},
		{"no token", "10.0.0.1:1", "198.51.1.5", "", "/v1/reports/1", 401},
	}
	for _, s := range steps {
		r, _ := http.NewRequest(http.MethodGet, s.path, nil)
		r.RemoteAddr = s.peer
		r.Header.Set("X-Forwarded-For", s.xff)
		if s.token != "" {
			r.Header.Set("Authorization", "Bearer "+s.token)
		}
		w := &discardWriter{h: http.Header{}}
		h.ServeHTTP(w, r)
		if w.code == 0 {
			w.code = http.StatusOK
		}
		if w.code != s.want {
			t.Errorf("%s: status %d, want %d", s.name, w.code, s.want)
		}
	}
}

// mintClaims signs claims with k (kid k1).
func mintClaims(tb testing.TB, k jwtKey, claims gojwt.MapClaims) string {
	tb.Helper()
	t := gojwt.NewWithClaims(k.method, claims)
	t.Header["kid"] = "k1"
	s, err := t.SignedString(k.priv)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
