package middleware_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/servertest"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/metrics"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// The hostile-input suite: every known way a bearer-token or API-key
// verifier has been fooled, sent through the real chain (ClientAddress →
// Authenticate → RateLimiter, plus the debug endpoint) with JWK Sets served
// by real HTTP servers. Each case states the HTTP status and RFC 6750 error
// code it must get; the WWW-Authenticate challenge and problem type follow
// from them and are asserted exactly. Afterwards every byte the suite
// produced (bodies, headers, debug output, logs, error texts, rate-limit
// keys) is scanned for the credentials it sent.

const (
	hIssA  = "https://a.hostile.test/" // JWKS: RS256, ES256, EdDSA keys
	hIssB  = "https://b.hostile.test/" // JWKS: one EdDSA key, kid "k1"
	hIssT  = "https://t.hostile.test/" // static EdDSA key, typ at+jwt required
	hIssD  = "https://d.hostile.test/" // JWKS server down
	hRealm = "ratekey"
)

var hb64 = base64.RawURLEncoding

// hostile is the fixture shared by every case.
type hostile struct {
	regs                []*prometheus.Registry // the stacks' metrics, scanned too
	now                 time.Time
	rsa                 *rsa.PrivateKey
	es                  *ecdsa.PrivateKey
	ed, edB, edT        ed25519.PrivateKey
	attacker            ed25519.PrivateKey
	srvA, srvB, srvD    *countingServer
	evil                *countingServer
	auth, authAll       *identity.CombinedAuthenticator
	jwt                 *identity.JWTAuthenticator
	apiKey, unknownKey  string
	wrongSecretKey      string
	handler, handlerAll http.Handler
	logs                *servertest.Buffer
}

type countingServer struct {
	*httptest.Server
	hits atomic.Int64
}

func newCountingServer(t *testing.T, status int, body []byte) *countingServer {
	s := &countingServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func jwkOf(kid, alg string, pub any) map[string]any {
	var m map[string]any
	switch k := pub.(type) {
	case ed25519.PublicKey:
		m = map[string]any{"kty": "OKP", "crv": "Ed25519", "x": hb64.EncodeToString(k)}
	case *ecdsa.PublicKey:
		pt, _ := k.Bytes()
		m = map[string]any{"kty": "EC", "crv": "P-256", "x": hb64.EncodeToString(pt[1:33]), "y": hb64.EncodeToString(pt[33:])}
	case *rsa.PublicKey:
		m = map[string]any{"kty": "RSA", "n": hb64.EncodeToString(k.N.Bytes()), "e": hb64.EncodeToString(big.NewInt(int64(k.E)).Bytes())}
	}
	m["kid"], m["alg"] = kid, alg
	return m
}

func jwksBody(keys ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

func newHostile(t *testing.T) *hostile {
	t.Helper()
	f := &hostile{now: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC), logs: &servertest.Buffer{}}
	var err error
	if f.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if f.es, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	gen := func() ed25519.PrivateKey { _, k, _ := ed25519.GenerateKey(rand.Reader); return k }
	f.ed, f.edB, f.edT, f.attacker = gen(), gen(), gen(), gen()

	f.srvA = newCountingServer(t, 200, jwksBody(jwkOf("rs", "RS256", &f.rsa.PublicKey), jwkOf("es", "ES256", &f.es.PublicKey), jwkOf("ed", "EdDSA", f.ed.Public())))
	f.srvB = newCountingServer(t, 200, jwksBody(jwkOf("k1", "EdDSA", f.edB.Public())))
	f.srvD = newCountingServer(t, 500, []byte("down"))
	f.evil = newCountingServer(t, 200, jwksBody(jwkOf("k1", "EdDSA", f.attacker.Public())))

	logger := slog.New(slog.NewTextHandler(f.logs, nil))
	rec := func(iss, tenant string, srv *countingServer, algs ...string) identity.IssuerRecord {
		return identity.IssuerRecord{Issuer: iss, Tenant: tenant, Audiences: []string{"api"}, Algorithms: algs, JWKSURL: srv.URL + "/jwks"}
	}
	f.jwt, err = identity.NewJWTAuthenticator(identity.JWTConfig{
		Now:    func() time.Time { return f.now },
		Logger: logger,
		JWKS:   identity.JWKSOptions{MissWait: 2 * time.Second, Timeout: 2 * time.Second},
		Issuers: []identity.IssuerRecord{
			rec(hIssA, "acme", f.srvA, "RS256", "PS256", "ES256", "EdDSA"),
			rec(hIssB, "globex", f.srvB, "EdDSA"),
			rec(hIssD, "initech", f.srvD, "EdDSA"),
			{Issuer: hIssT, Tenant: "typed", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, Typ: "at+jwt",
				Keys: []identity.VerificationKey{{KID: "t1", Key: f.edT.Public()}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.jwt.Close() })

	pepper := []byte("hostile-suite-pepper-0123456789abcdef")
	var recA identity.APIKeyRecord
	if f.apiKey, recA, err = identity.NewAPIKey(pepper, "acme", "svc"); err != nil {
		t.Fatal(err)
	}
	if f.unknownKey, _, err = identity.NewAPIKey(pepper, "acme", "ghost"); err != nil {
		t.Fatal(err)
	}
	body := f.apiKey[:len(f.apiKey)-6]
	flip := []byte(body)
	flip[30] ^= 'a' ^ 'b'
	if flip[30] == body[30] || !isBase62(flip[30]) {
		flip[30] = 'Q'
	}
	f.wrongSecretKey = string(flip) + apiKeyChecksum(string(flip))
	store, err := identity.NewMemoryAPIKeyStore([]identity.APIKeyRecord{recA})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := identity.NewAPIKeyAuthenticator(identity.APIKeyConfig{Store: store, Pepper: pepper})
	if err != nil {
		t.Fatal(err)
	}
	if f.auth, err = identity.NewCombinedAuthenticator(identity.CombinedConfig{JWT: f.jwt, APIKeys: keys}); err != nil {
		t.Fatal(err)
	}
	if f.authAll, err = identity.NewCombinedAuthenticator(identity.CombinedConfig{JWT: f.jwt, APIKeys: keys,
		Sources: []identity.Source{identity.SourceHeader, identity.SourceQuery, identity.SourceCookie}, CookieName: "session"}); err != nil {
		t.Fatal(err)
	}
	f.handler = f.stack(t, f.auth, logger)
	f.handlerAll = f.stack(t, f.authAll, logger)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.jwt.Ready(ctx); err == nil || !errors.Is(err, identity.ErrKeySourceUnavailable) || !strings.Contains(err.Error(), hIssD) {
		t.Fatalf("Ready = %v, want only %s unavailable", err, hIssD)
	}
	return f
}

// stack mounts the chain and the debug endpoint over a.
func (f *hostile) stack(t *testing.T, a identity.Authenticator, logger *slog.Logger) http.Handler {
	res, err := trustedproxy.New(trustedproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	f.regs = append(f.regs, reg)
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Metrics: m,
		Limiter: memory.New(memory.Options{MaxKeys: 10000}),
		Policies: []policy.Policy{{Name: "per-credential", DryRun: true, OnMissing: policy.OnMissingSkip,
			Key:   []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount, limitkey.DimCredential},
			Limit: limit("1/h", 1)}},
		Operation: middleware.RouteOperation(r),
		Logger:    logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := middleware.AuthOptions{Realm: hRealm, Metrics: m}
	r.Handle("/debug/ratekey", mustDebug(t, middleware.DebugConfig{Resolver: res, Authenticator: a, Auth: opts, RateLimiter: rl, Allow: []string{"192.0.2.0/24"}}))
	r.With(middleware.ClientAddress(res, middleware.ClientAddressOptions{Metrics: m}), middleware.Authenticate(a, opts), rl.Handler).Get("/v1/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		p, _ := middleware.PrincipalFrom(r.Context())
		_ = json.NewEncoder(w).Encode(p)
	})
	return r
}

// Token builders.

func (f *hostile) claims(iss string) map[string]any {
	return map[string]any{"iss": iss, "sub": "alice", "aud": "api", "exp": f.now.Add(time.Hour).Unix(), "iat": f.now.Add(-time.Minute).Unix()}
}

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// raw signs exact header and payload text with method and key (nil method:
// empty signature).
func raw(method jwt.SigningMethod, key any, header, payload string) string {
	s := hb64.EncodeToString([]byte(header)) + "." + hb64.EncodeToString([]byte(payload))
	if method == nil {
		return s + "."
	}
	sig, err := method.Sign(s, key)
	if err != nil {
		panic(err)
	}
	return s + "." + hb64.EncodeToString(sig)
}

func sign(method jwt.SigningMethod, key any, hdr, claims map[string]any) string {
	h := map[string]any{"alg": method.Alg(), "typ": "JWT"}
	for k, v := range hdr {
		if v == nil {
			delete(h, k)
		} else {
			h[k] = v
		}
	}
	return raw(method, key, js(h), js(claims))
}

func (f *hostile) edA(claims map[string]any) string {
	return sign(jwt.SigningMethodEdDSA, f.ed, map[string]any{"kid": "ed"}, claims)
}

func (f *hostile) okA() string { return f.edA(f.claims(hIssA)) }

// withSig replaces a token's signature segment.
func withSig(tok string, sig []byte) string {
	return tok[:strings.LastIndexByte(tok, '.')+1] + hb64.EncodeToString(sig)
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func isBase62(c byte) bool { return strings.IndexByte(base62, c) >= 0 }

func apiKeyChecksum(s string) string {
	v := crc32.ChecksumIEEE([]byte(s))
	b := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		b[i] = base62[v%62]
		v /= 62
	}
	return string(b)
}

// hreq is one request of a case.
type hreq struct {
	auth   []string    // Authorization lines
	h      http.Header // other headers
	query  string      // raw query
	all    bool        // use the stack with query and cookie sources enabled
	secret []string    // extra secrets to scan for besides the Authorization tokens
}

func bearer(tok string) hreq { return hreq{auth: []string{"Bearer " + tok}} }

type hostileCase struct {
	name   string
	req    func(f *hostile) hreq
	status int    // expected HTTP status
	code   string // RFC 6750 error code: "", "invalid_request", "invalid_token"
	detail string // optional: expected problem detail
	repeat int    // send this many requests (req is called for each)
	check  func(t *testing.T, f *hostile)
}

func hostileCases() []hostileCase {
	const (
		ok   = http.StatusOK
		r400 = http.StatusBadRequest
		r401 = http.StatusUnauthorized
		r503 = http.StatusServiceUnavailable
		ir   = "invalid_request"
		it   = "invalid_token"
	)
	tok := func(build func(f *hostile) string) func(f *hostile) hreq {
		return func(f *hostile) hreq { return bearer(build(f)) }
	}
	claimsA := func(kv ...any) func(f *hostile) hreq {
		return tok(func(f *hostile) string { return f.edA(with(f.claims(hIssA), kv...)) })
	}
	payloadA := func(edit func(string) string) func(f *hostile) hreq {
		return tok(func(f *hostile) string {
			return raw(jwt.SigningMethodEdDSA, f.ed, `{"alg":"EdDSA","kid":"ed"}`, edit(js(f.claims(hIssA))))
		})
	}
	hdrA := func(hdr map[string]any) func(f *hostile) hreq {
		return tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, with(hdr, "kid", "ed"), f.claims(hIssA))
		})
	}
	none := func(alg string) func(f *hostile) hreq {
		return tok(func(f *hostile) string { return raw(nil, nil, `{"alg":"`+alg+`","typ":"JWT"}`, js(f.claims(hIssA))) })
	}
	return []hostileCase{
		// --- Transport (RFC 6750 §2.1, §3.1; RFC 9110 §11) ---
		{name: "transport/valid baseline", req: func(f *hostile) hreq { return bearer(f.okA()) }, status: ok},
		{name: "transport/no credential", req: func(*hostile) hreq { return hreq{} }, status: r401, detail: "no credential was presented"},
		{name: "transport/Basic instead of Bearer", req: func(*hostile) hreq { return hreq{auth: []string{"Basic YWxpY2U6c2VjcmV0"}} }, status: r401},
		{name: "transport/Digest scheme", req: func(*hostile) hreq { return hreq{auth: []string{`Digest username="alice"`}} }, status: r401},
		{name: "transport/scheme lower case", req: func(f *hostile) hreq { return hreq{auth: []string{"bearer " + f.okA()}} }, status: ok},
		{name: "transport/scheme upper case", req: func(f *hostile) hreq { return hreq{auth: []string{"BEARER " + f.okA()}} }, status: ok},
		{name: "transport/two Authorization lines", req: func(f *hostile) hreq { return hreq{auth: []string{"Bearer " + f.okA(), "Bearer " + f.okA()}} }, status: r400, code: ir},
		{name: "transport/empty Authorization", req: func(*hostile) hreq { return hreq{auth: []string{""}} }, status: r400, code: ir},
		{name: "transport/Bearer without token", req: func(*hostile) hreq { return hreq{auth: []string{"Bearer"}} }, status: r400, code: ir},
		{name: "transport/HTAB separator", req: func(f *hostile) hreq { return hreq{auth: []string{"Bearer\t" + f.okA()}} }, status: r400, code: ir},
		{name: "transport/comma-joined tokens", req: func(f *hostile) hreq { return hreq{auth: []string{"Bearer " + f.okA() + ", Bearer " + f.okA()}} }, status: r400, code: ir},
		{name: "transport/1 MiB token", req: func(*hostile) hreq { return bearer(strings.Repeat("A", 1<<20)) }, status: r401, code: it, detail: "token is too long"},
		{name: "transport/token of MaxTokenBytes+1", req: func(f *hostile) hreq {
			return bearer(f.edA(with(f.claims(hIssA), "pad", strings.Repeat("x", 8192))))
		}, status: r401, code: it, detail: "token is too long"},
		{name: "transport/CVE-2025-30204 8000 periods", req: func(*hostile) hreq { return bearer(strings.Repeat(".", 8000)) }, status: r401, code: it},
		{name: "transport/bearer token and API key", req: func(f *hostile) hreq {
			return hreq{auth: []string{"Bearer " + f.okA()}, h: http.Header{"X-Api-Key": {f.apiKey}}}
		}, status: r400, code: ir, detail: "credentials presented in more than one place"},
		{name: "transport/Basic and API key", req: func(f *hostile) hreq {
			return hreq{auth: []string{"Basic YWxpY2U6c2VjcmV0"}, h: http.Header{"X-Api-Key": {f.apiKey}}}
		}, status: r400, code: ir},
		{name: "transport/two X-API-Key lines", req: func(f *hostile) hreq { return hreq{h: http.Header{"X-Api-Key": {f.apiKey, f.apiKey}}} }, status: r400, code: ir},
		{name: "transport/token in query string is ignored by default", req: func(f *hostile) hreq {
			return hreq{query: "access_token=" + f.okA()}
		}, status: r401},
		{name: "transport/token in query string (opt-in)", req: func(f *hostile) hreq { return hreq{query: "access_token=" + f.okA(), all: true} }, status: ok},
		{name: "transport/tokens in header and query", req: func(f *hostile) hreq {
			return hreq{auth: []string{"Bearer " + f.okA()}, query: "access_token=" + f.okA(), all: true}
		}, status: r400, code: ir},
		{name: "transport/tokens in cookie and query", req: func(f *hostile) hreq {
			return hreq{h: http.Header{"Cookie": {"session=" + f.okA()}}, query: "access_token=" + f.okA(), all: true}
		}, status: r400, code: ir},
		{name: "transport/two access_token parameters", req: func(f *hostile) hreq {
			return hreq{query: "access_token=" + f.okA() + "&access_token=x", all: true}
		}, status: r400, code: ir},

		// --- Structure (RFC 7515 §7.1, §5.2) ---
		{name: "structure/two segments", req: tok(func(f *hostile) string { t := f.okA(); return t[:strings.LastIndexByte(t, '.')] }), status: r401, code: it},
		{name: "structure/four segments", req: tok(func(f *hostile) string { return f.okA() + ".AAAA" }), status: r401, code: it},
		{name: "structure/JWE-like five segments", req: tok(func(f *hostile) string { return "eyJhbGciOiJSU0EtT0FFUCJ9.a.b.c.d" }), status: r401, code: it},
		{name: "structure/empty segments", req: tok(func(*hostile) string { return ".." }), status: r401, code: it},
		{name: "structure/padded header", req: tok(func(f *hostile) string { t := f.okA(); i := strings.IndexByte(t, '.'); return t[:i] + "==" + t[i:] }), status: r400, code: ir},
		{name: "structure/padded signature", req: tok(func(f *hostile) string { return f.okA() + "==" }), status: r401, code: it, detail: "token is malformed"},
		{name: "structure/standard base64 alphabet", req: tok(func(*hostile) string { return "eyJ+/w.eyJ+/w.AAAA" }), status: r401, code: it},
		{name: "structure/header not JSON", req: tok(func(f *hostile) string { return raw(jwt.SigningMethodEdDSA, f.ed, `alg=EdDSA`, js(f.claims(hIssA))) }), status: r401, code: it},
		{name: "structure/payload JSON array", req: tok(func(f *hostile) string {
			return raw(jwt.SigningMethodEdDSA, f.ed, `{"alg":"EdDSA","kid":"ed"}`, `[1,2]`)
		}), status: r401, code: it},
		{name: "structure/duplicate alg in header", req: tok(func(f *hostile) string {
			return raw(jwt.SigningMethodEdDSA, f.ed, `{"alg":"none","alg":"EdDSA","kid":"ed"}`, js(f.claims(hIssA)))
		}), status: r401, code: it},

		// --- Algorithm (RFC 8725 §2.1, §3.1) ---
		{name: "algorithm/alg none (McLean 2015)", req: none("none"), status: r401, code: it, detail: "algorithm not allowed"},
		{name: "algorithm/alg None", req: none("None"), status: r401, code: it},
		{name: "algorithm/alg NONE", req: none("NONE"), status: r401, code: it},
		{name: "algorithm/alg nOnE", req: none("nOnE"), status: r401, code: it},
		{name: "algorithm/alg none with a copied signature", req: tok(func(f *hostile) string {
			good := f.okA()
			return raw(nil, nil, `{"alg":"none","kid":"ed"}`, js(f.claims(hIssA))) + good[strings.LastIndexByte(good, '.')+1:]
		}), status: r401, code: it},
		{name: "algorithm/CVE-2015-9235 RS256 to HS256 with the PEM public key as secret", req: tok(func(f *hostile) string {
			der, _ := x509.MarshalPKIXPublicKey(&f.rsa.PublicKey)
			secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
			return sign(jwt.SigningMethodHS256, secret, map[string]any{"kid": "rs"}, f.claims(hIssA))
		}), status: r401, code: it, detail: "algorithm not allowed"},
		{name: "algorithm/CVE-2016-5431 HS256 with the JWK JSON as secret", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodHS256, []byte(js(jwkOf("rs", "RS256", &f.rsa.PublicKey))), map[string]any{"kid": "rs"}, f.claims(hIssA))
		}), status: r401, code: it},
		{name: "algorithm/PS256 with an RS256-bound key", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodPS256, f.rsa, map[string]any{"kid": "rs"}, f.claims(hIssA))
		}), status: r401, code: it, detail: "token algorithm does not match its key"},
		{name: "algorithm/ES256 signature one byte short", req: tok(func(f *hostile) string {
			t := sign(jwt.SigningMethodES256, f.es, map[string]any{"kid": "es"}, f.claims(hIssA))
			sig, _ := hb64.DecodeString(t[strings.LastIndexByte(t, '.')+1:])
			return withSig(t, sig[:63])
		}), status: r401, code: it, detail: "token signature is invalid"},
		{name: "algorithm/CVE-2022-21449 ES256 all-zero signature", req: tok(func(f *hostile) string {
			return withSig(sign(jwt.SigningMethodES256, f.es, map[string]any{"kid": "es"}, f.claims(hIssA)), make([]byte, 64))
		}), status: r401, code: it, detail: "token signature is invalid"},
		{name: "algorithm/ES256 ASN.1 DER signature", req: tok(func(f *hostile) string {
			t := sign(jwt.SigningMethodES256, f.es, map[string]any{"kid": "es"}, f.claims(hIssA))
			s := t[:strings.LastIndexByte(t, '.')]
			h := sha256.Sum256([]byte(s))
			der, _ := ecdsa.SignASN1(rand.Reader, f.es, h[:])
			return withSig(t, der)
		}), status: r401, code: it, detail: "token signature is invalid"},
		{name: "algorithm/ES384 on a P-256 kid", req: tok(func(f *hostile) string {
			return raw(jwt.SigningMethodES256, f.es, `{"alg":"ES384","kid":"es"}`, js(f.claims(hIssA)))
		}), status: r401, code: it, detail: "algorithm not allowed"},
		{name: "algorithm/EdDSA token naming the ES256 kid", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, map[string]any{"kid": "es"}, f.claims(hIssA))
		}), status: r401, code: it, detail: "token algorithm does not match its key"},
		{name: "algorithm/unknown alg name", req: tok(func(f *hostile) string {
			return raw(jwt.SigningMethodEdDSA, f.ed, `{"alg":"Ed448","kid":"ed"}`, js(f.claims(hIssA)))
		}), status: r401, code: it, detail: "algorithm not allowed"},

		// --- Keys and header parameters (RFC 7515 §4.1, RFC 8725 §3.10) ---
		{name: "keys/kid path traversal", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, map[string]any{"kid": "../../../../../../dev/null"}, f.claims(hIssA))
		}), status: r401, code: it, detail: "unknown key id"},
		{name: "keys/kid SQL injection", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, map[string]any{"kid": "x' UNION SELECT 'secret' --"}, f.claims(hIssA))
		}), status: r401, code: it, detail: "unknown key id"},
		{name: "keys/kid not a string", req: tok(func(f *hostile) string {
			return raw(jwt.SigningMethodEdDSA, f.ed, `{"alg":"EdDSA","kid":["ed"]}`, js(f.claims(hIssA)))
		}), status: r401, code: it},
		{name: "keys/1000 random kids cost at most one refresh", repeat: 1000, req: tok(func(f *hostile) string {
			var b [12]byte
			_, _ = rand.Read(b[:])
			return sign(jwt.SigningMethodEdDSA, f.ed, map[string]any{"kid": hb64.EncodeToString(b[:])}, f.claims(hIssA))
		}), status: r401, code: it, detail: "unknown key id", check: func(t *testing.T, f *hostile) {
			if n := f.srvA.hits.Load(); n > 2 {
				t.Fatalf("issuer A's JWK Set fetched %d times after 1000 unknown kids, want at most 2", n)
			}
		}},
		{name: "keys/cross-issuer: A's key, B's kid, iss B", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, map[string]any{"kid": "k1"}, f.claims(hIssB))
		}), status: r401, code: it, detail: "token signature is invalid"},
		{name: "keys/cross-issuer: A's key and kid, iss B", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, map[string]any{"kid": "ed"}, f.claims(hIssB))
		}), status: r401, code: it, detail: "unknown key id"},
		{name: "keys/cross-issuer: A's key, no kid, iss B", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, nil, f.claims(hIssB))
		}), status: r401, code: it, detail: "token signature is invalid"},
		{name: "keys/valid token of issuer B", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.edB, map[string]any{"kid": "k1"}, f.claims(hIssB))
		}), status: ok},
		{name: "keys/no kid with several keys in the set", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, nil, f.claims(hIssA))
		}), status: r401, code: it},
		{name: "keys/crit naming exp", req: hdrA(map[string]any{"crit": []string{"exp"}, "exp": 1}), status: r401, code: it, detail: "token has a critical header parameter that is not understood"},
		{name: "keys/crit empty list", req: hdrA(map[string]any{"crit": []string{}}), status: r401, code: it},
		{name: "keys/jku to an attacker's JWK Set", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.attacker, map[string]any{"kid": "k1", "jku": f.evil.URL + "/jwks"}, f.claims(hIssA))
		}), status: r401, code: it, detail: "token header parameter is not allowed", check: func(t *testing.T, f *hostile) {
			if f.evil.hits.Load() != 0 {
				t.Fatal("the jku URL was fetched")
			}
		}},
		{name: "keys/x5u to an attacker's certificate", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.attacker, map[string]any{"kid": "ed", "x5u": f.evil.URL + "/cert"}, f.claims(hIssA))
		}), status: r401, code: it, detail: "token header parameter is not allowed"},
		{name: "keys/CVE-2018-0114 embedded jwk", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.attacker, map[string]any{"kid": "ed", "jwk": jwkOf("ed", "EdDSA", f.attacker.Public())}, f.claims(hIssA))
		}), status: r401, code: it, detail: "token header parameter is not allowed"},
		{name: "keys/embedded x5c chain", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.attacker, map[string]any{"kid": "ed", "x5c": []string{"MIIBszCCAVmgAwIBAgIU"}}, f.claims(hIssA))
		}), status: r401, code: it},
		{name: "keys/typ at+jwt required and absent", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.edT, map[string]any{"kid": "t1", "typ": nil}, f.claims(hIssT))
		}), status: r401, code: it, detail: "token type is not accepted"},
		{name: "keys/typ JWT where at+jwt is required", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.edT, map[string]any{"kid": "t1", "typ": "JWT"}, f.claims(hIssT))
		}), status: r401, code: it, detail: "token type is not accepted"},
		{name: "keys/typ application/at+jwt accepted", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.edT, map[string]any{"kid": "t1", "typ": "application/at+jwt"}, f.claims(hIssT))
		}), status: ok},
		{name: "keys/JWK Set unreachable with nothing cached", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.ed, map[string]any{"kid": "k1"}, f.claims(hIssD))
		}), status: r503},

		// --- Claims (RFC 7519 §4.1, RFC 8725 §3.8-3.9) ---
		{name: "claims/CVE-2024-51744 forged and expired reports the signature", req: tok(func(f *hostile) string {
			return sign(jwt.SigningMethodEdDSA, f.attacker, map[string]any{"kid": "ed"}, with(f.claims(hIssA), "exp", f.now.Add(-time.Hour).Unix()))
		}), status: r401, code: it, detail: "token signature is invalid"},
		{name: "claims/expired beyond leeway", req: claimsA("exp", time.Date(2026, 5, 6, 7, 7, 0, 0, time.UTC).Unix()), status: r401, code: it, detail: "token is expired"},
		{name: "claims/expired within leeway", req: claimsA("exp", time.Date(2026, 5, 6, 7, 7, 50, 0, time.UTC).Unix()), status: ok},
		{name: "claims/exp missing", req: claimsA("exp", nil), status: r401, code: it, detail: "token has no expiration time"},
		{name: "claims/exp 0", req: claimsA("exp", 0), status: r401, code: it, detail: "token expiration time is invalid"},
		{name: "claims/exp negative", req: claimsA("exp", -1), status: r401, code: it},
		{name: "claims/exp quoted NumericDate", req: claimsA("exp", "4102444800"), status: r401, code: it, detail: "token claims are malformed"},
		{name: "claims/exp 1e300", req: claimsA("exp", 1e300), status: r401, code: it},
		{name: "claims/exp boolean", req: claimsA("exp", true), status: r401, code: it},
		{name: "claims/nbf in the future", req: claimsA("nbf", time.Date(2026, 5, 6, 7, 10, 0, 0, time.UTC).Unix()), status: r401, code: it, detail: "token is not valid yet"},
		{name: "claims/iat in the future beyond leeway", req: claimsA("iat", time.Date(2026, 5, 6, 7, 10, 0, 0, time.UTC).Unix()), status: r401, code: it, detail: "token is issued in the future"},
		{name: "claims/iat in the future within leeway", req: claimsA("iat", time.Date(2026, 5, 6, 7, 8, 30, 0, time.UTC).Unix()), status: ok},
		{name: "claims/wrong audience", req: claimsA("aud", "other-api"), status: r401, code: it, detail: "token audience is not accepted"},
		{name: "claims/aud array containing ours", req: claimsA("aud", []string{"other", "api"}), status: ok},
		{name: "claims/aud array with a number", req: claimsA("aud", []any{"api", 7}), status: r401, code: it, detail: "token claims are malformed"},
		{name: "claims/aud a number", req: claimsA("aud", 7), status: r401, code: it},
		{name: "claims/CVE-2020-26160 aud empty string in an array", req: claimsA("aud", []string{""}), status: r401, code: it},
		{name: "claims/aud missing", req: claimsA("aud", nil), status: r401, code: it, detail: "token audience is missing"},
		{name: "claims/aud case variant", req: claimsA("aud", "API"), status: r401, code: it},
		{name: "claims/duplicate sub", req: payloadA(func(p string) string {
			return strings.Replace(p, `"sub":"alice"`, `"sub":"alice","sub":"root"`, 1)
		}), status: r401, code: it},
		{name: "claims/escaped duplicate sub", req: payloadA(func(p string) string {
			return strings.Replace(p, `"sub":"alice"`, `"sub":"alice","s\u0075b":"root"`, 1)
		}), status: r401, code: it},
		{name: "claims/case-variant Sub", req: claimsA("Sub", "root"), status: r401, code: it, detail: "token claims are malformed"},
		{name: "claims/Unicode-fold variant of sub", req: claimsA("\u017fub", "root"), status: r401, code: it},
		{name: "claims/sub missing", req: claimsA("sub", nil), status: r401, code: it, detail: "token subject is missing"},
		{name: "claims/unknown issuer", req: claimsA("iss", "https://evil.example/"), status: r401, code: it, detail: "token issuer is not accepted"},
		{name: "claims/issuer case variant", req: claimsA("iss", strings.ToUpper(hIssA)), status: r401, code: it},
		{name: "claims/issuer as an array", req: claimsA("iss", []string{hIssA}), status: r401, code: it},

		// --- API keys ---
		{name: "apikey/valid in X-API-Key", req: func(f *hostile) hreq { return hreq{h: http.Header{"X-Api-Key": {f.apiKey}}} }, status: ok},
		{name: "apikey/valid as Bearer", req: func(f *hostile) hreq { return bearer(f.apiKey) }, status: ok},
		{name: "apikey/typo caught by the checksum", req: func(f *hostile) hreq {
			k := []byte(f.apiKey)
			k[20] = map[bool]byte{true: 'x', false: 'y'}[k[20] != 'x']
			return hreq{h: http.Header{"X-Api-Key": {string(k)}}, secret: []string{string(k)}}
		}, status: r401, code: it, detail: "API key is malformed"},
		{name: "apikey/unknown id", req: func(f *hostile) hreq { return hreq{h: http.Header{"X-Api-Key": {f.unknownKey}}} }, status: r401, code: it, detail: "API key is invalid"},
		{name: "apikey/wrong secret", req: func(f *hostile) hreq { return hreq{h: http.Header{"X-Api-Key": {f.wrongSecretKey}}} }, status: r401, code: it, detail: "API key is invalid"},
		{name: "apikey/JWT in X-API-Key", req: func(f *hostile) hreq { return hreq{h: http.Header{"X-Api-Key": {f.okA()}}} }, status: r401, code: it},
		{name: "apikey/empty X-API-Key", req: func(*hostile) hreq { return hreq{h: http.Header{"X-Api-Key": {""}}} }, status: r400, code: ir},
	}
}

// TestHostileInputs runs the suite and then the secrets scan (responses,
// debug output, logs, keys, error texts and the metrics).
func TestHostileInputs(t *testing.T) {
	f := newHostile(t)
	var out bytes.Buffer // everything the suite produced
	var secrets []string
	addSecret := func(s string) {
		if len(s) >= 12 {
			secrets = append(secrets, s)
		}
	}
	cases := hostileCases()
	if len(cases) < 50 {
		t.Fatalf("only %d hostile cases", len(cases))
	}
	counts := map[string]int{}
	for _, tc := range cases {
		counts[tc.name[:strings.IndexByte(tc.name, '/')]]++
		t.Run(tc.name, func(t *testing.T) {
			n := max(tc.repeat, 1)
			for i := 0; i < n; i++ {
				q := tc.req(f)
				for _, line := range q.auth {
					tok := strings.TrimSpace(line[strings.IndexByte(line+" ", ' '):])
					addSecret(tok)
					if j := strings.LastIndexByte(tok, '.'); j >= 0 {
						addSecret(tok[j+1:])
					}
				}
				for _, v := range q.h["X-Api-Key"] {
					addSecret(v)
					if len(v) > 16 {
						addSecret(v[16:]) // the secret and checksum of an rk_ key
					}
				}
				if q.query != "" {
					if v, err := url.ParseQuery(q.query); err == nil {
						for _, tok := range v["access_token"] {
							addSecret(tok)
						}
					}
				}
				for _, s := range q.secret {
					addSecret(s)
				}
				w := f.do(q, "/v1/reports/1")
				f.assert(t, tc, w)
				out.WriteString(dump(w))
				d := f.do(q, "/debug/ratekey?method=GET&path=/v1/reports/1")
				if d.Code != http.StatusOK {
					t.Fatalf("debug endpoint: %d %s", d.Code, d.Body)
				}
				out.WriteString(dump(d))
				// The error texts, as a caller logging err.Error() would see them.
				r := f.request(q, "/v1/reports/1")
				a := f.auth
				if q.all {
					a = f.authAll
				}
				if _, err := a.Authenticate(r); err != nil {
					for e := err; e != nil; e = errors.Unwrap(e) {
						out.WriteString(e.Error() + "\n")
					}
				}
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
	t.Logf("hostile cases per category: %v (total %d)", counts, len(cases))

	out.WriteString(f.logs.String())
	for _, reg := range f.regs { // the metrics, as a scrape would see them
		w := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if !strings.Contains(w.Body.String(), "ratekey_authentication_failures_total") {
			t.Error("expected authentication failures in the scanned metrics")
		}
		out.WriteString(w.Body.String())
	}
	if !strings.Contains(f.logs.String(), "REJECTED_DRY_RUN") || !strings.Contains(f.logs.String(), "JWK Set fetch failed") {
		t.Errorf("expected rate-limit and JWKS log lines to scan; logs:\n%s", f.logs.String())
	}
	if !strings.Contains(out.String(), "per-credential|tenant=acme|account=svc|credential=") {
		t.Error("expected an API-key rate-limit key in the scanned output")
	}
	// The scan means something only if the suite presented secrets (about
	// 2 000 today).
	if len(secrets) < 1000 {
		t.Fatalf("only %d secrets collected from %d cases; the scan would prove little", len(secrets), len(cases))
	}
	scanned := out.String()
	hits := scanSecrets(scanned, secrets)
	for _, s := range hits {
		t.Errorf("secret of %d bytes found in the suite's output (prefix %q)", len(s), s[:8])
	}
	t.Logf("secrets scan: %d secrets over %d bytes of responses, debug output, logs, keys, error texts and metrics: %d hits", len(secrets), len(scanned), len(hits))
}

// scanSecrets returns the secrets (each at least 12 bytes) that occur in
// text. It indexes the secrets by their first 12 bytes and slides a 12-byte
// window over text once, so thousands of secrets over megabytes of output
// cost one pass; the naive strings.Contains per secret is the reference in
// TestScanSecrets.
func scanSecrets(text string, secrets []string) []string {
	const w = 12
	byPrefix := map[string][]string{}
	for _, s := range secrets {
		byPrefix[s[:w]] = append(byPrefix[s[:w]], s)
	}
	found := map[string]bool{}
	var hits []string
	for i := 0; i+w <= len(text); i++ {
		for _, s := range byPrefix[text[i:i+w]] {
			if !found[s] && strings.HasPrefix(text[i:], s) {
				found[s] = true
				hits = append(hits, s)
			}
		}
	}
	return hits
}

func TestScanSecrets(t *testing.T) {
	text := "aaa SECRETVALUE-123456 bbb eyJhbGciOi.sig-abcdefghijkl"
	secrets := []string{"SECRETVALUE-123456", "SECRETVALUE-999999", "sig-abcdefghijkl", "sig-abcdefghijkl-longer", "not-present-at-all"}
	got := scanSecrets(text, secrets)
	var want []string
	for _, s := range secrets {
		if strings.Contains(text, s) {
			want = append(want, s)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("scanSecrets = %v, want %v", got, want)
	}
}

func (f *hostile) request(q hreq, target string) *http.Request {
	if q.query != "" {
		if strings.Contains(target, "?") {
			target += "&" + q.query
		} else {
			target += "?" + q.query
		}
	}
	r := httptest.NewRequest(http.MethodGet, "http://api.test"+target, nil)
	r.RemoteAddr = "192.0.2.10:4321"
	for k, v := range q.h {
		r.Header[k] = v
	}
	for _, l := range q.auth {
		r.Header.Add("Authorization", l)
	}
	return r
}

func (f *hostile) do(q hreq, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h := f.handler
	if q.all {
		h = f.handlerAll
	}
	h.ServeHTTP(w, f.request(q, target))
	return w
}

func (f *hostile) assert(t *testing.T, tc hostileCase, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != tc.status {
		t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
	}
	challenge := w.Header().Get("WWW-Authenticate")
	switch {
	case tc.status == http.StatusOK:
		if challenge != "" {
			t.Fatalf("challenge on success: %q", challenge)
		}
		return
	case tc.status == http.StatusServiceUnavailable:
		if challenge != "" || w.Header().Get("Retry-After") == "" {
			t.Fatalf("503: challenge %q, Retry-After %q", challenge, w.Header().Get("Retry-After"))
		}
	default:
		want := `Bearer realm="` + hRealm + `"`
		if tc.code != "" {
			want += `, error="` + tc.code + `"`
		}
		if challenge != want || len(w.Header().Values("WWW-Authenticate")) != 1 {
			t.Fatalf("WWW-Authenticate = %q, want %q (RFC 6750 §3)", challenge, want)
		}
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, w.Body)
	}
	wantType := map[string]string{"": "urn:ratekey:problem:unauthenticated", "invalid_request": "urn:ratekey:problem:invalid-request",
		"invalid_token": "urn:ratekey:problem:invalid-token"}[tc.code]
	if tc.status == http.StatusServiceUnavailable {
		wantType = "urn:ratekey:problem:key-source-unavailable"
	}
	if p.Type != wantType || p.Status != tc.status {
		t.Fatalf("problem %+v, want type %s", p, wantType)
	}
	if tc.detail != "" && p.Detail != tc.detail {
		t.Fatalf("detail %q, want %q", p.Detail, tc.detail)
	}
}

func dump(w *httptest.ResponseRecorder) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", w.Code)
	_ = w.Header().Write(&b)
	b.Write(w.Body.Bytes())
	b.WriteByte('\n')
	return b.String()
}

var _ = crypto.SHA256
