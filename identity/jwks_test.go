package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

const (
	issJ1 = "https://j1.example/"
	issJ2 = "https://j2.example/"
)

// TestJWKSVerifiesEachFamily: one set holding an Ed25519, a P-256 and an
// RSA key, fetched once, verifies a token of each algorithm.
func TestJWKSVerifiesEachFamily(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("ed", "EdDSA", k.ed.Public()), jwk("es", "", &k.es.PublicKey), jwk("rs", "RS256", &k.rsa.PublicKey))
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{}, jwksRecord(issJ1, "j1", srv, "EdDSA", "ES256", "RS256"))
		for _, tc := range []struct {
			alg, kid string
			key      any
		}{{"EdDSA", "ed", k.ed}, {"ES256", "es", k.es}, {"RS256", "rs", k.rsa}} {
			p := verifyOK(t, a, mint(t, tc.alg, tc.key, obj{"kid": tc.kid}, baseClaims(issJ1)))
			if p.Tenant != "j1" || p.Account != "alice" || p.Issuer != issJ1 {
				t.Fatalf("%s: principal %+v", tc.alg, p)
			}
		}
		if n := srv.hits.Load(); n != 1 {
			t.Fatalf("fetches = %d, want 1", n)
		}
	})
}

// TestJWKSNoPoolingAcrossIssuers pins the keyfunc/Fiber pooling problem
// (LESSONS: "tenant A's key verifies iss: B tokens"): two issuers publish a
// key under the same kid; a token naming issuer B signed with A's key fails,
// with and without kid, and A's set is never consulted for B.
func TestJWKSNoPoolingAcrossIssuers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srvA := newJWKSServer(t, jwk("k1", "EdDSA", k.edC.Public()))
		srvB := newJWKSServer(t, jwk("k1", "EdDSA", k.edD.Public()))
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{},
			jwksRecord(issJ1, "ta", srvA, "EdDSA"), jwksRecord(issJ2, "tb", srvB, "EdDSA"))
		verifyOK(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issJ1)))
		verifyOK(t, a, mint(t, "EdDSA", k.edD, obj{"kid": "k1"}, baseClaims(issJ2)))
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issJ2)), "token signature is invalid")
		verifyDesc(t, a, mint(t, "EdDSA", k.edC, nil, baseClaims(issJ2)), "token signature is invalid")
		verifyDesc(t, a, mint(t, "EdDSA", k.edD, obj{"kid": "k1"}, baseClaims(issJ1)), "token signature is invalid")
		// A kid only A publishes, on a token naming B: unknown in B's set.
		srvA.setKeys(jwk("k1", "EdDSA", k.edC.Public()), jwk("only-a", "EdDSA", k.ed.Public()))
		verifyOK(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "only-a"}, baseClaims(issJ1))) // A refreshes on the miss
		verifyDesc(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "only-a"}, baseClaims(issJ2)), "unknown key id")
	})
}

// TestJWKSBackgroundRotation: the set is refreshed every Refresh on the
// (fake) clock; a rotated-out key stops verifying, the new one verifies.
func TestJWKSBackgroundRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("old", "EdDSA", k.ed.Public()))
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{Refresh: time.Hour}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		if err := a.Ready(context.Background()); err != nil {
			t.Fatal(err)
		}
		set := a.set(issJ1)
		old := mint(t, "EdDSA", k.ed, obj{"kid": "old"}, baseClaims(issJ1).with("exp", testNow.Add(3*time.Hour).Unix()))
		verifyOK(t, a, old)

		srv.setKeys(jwk("new", "EdDSA", k.edOther.Public()))
		advance(59 * time.Minute)
		if n := srv.hits.Load(); n != 1 {
			t.Fatalf("refreshed before the interval: %d fetches", n)
		}
		advance(time.Minute)
		set.waitAttempts(t, 2)
		verifyOK(t, a, mint(t, "EdDSA", k.edOther, obj{"kid": "new"}, baseClaims(issJ1).with("iat", now().Unix())))
		verifyDesc(t, a, old, "unknown key id") // the miss may refresh once; the key is gone
		if n := srv.hits.Load(); n > 3 {
			t.Fatalf("fetches = %d, want at most 3", n)
		}
	})
}

// TestJWKSRotationOnUnknownKid: a new kid published between refreshes is
// picked up by the one refresh its first use triggers.
func TestJWKSRotationOnUnknownKid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		verifyOK(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1)))
		srv.setKeys(jwk("k1", "EdDSA", k.ed.Public()), jwk("k2", "EdDSA", k.edOther.Public()))
		verifyOK(t, a, mint(t, "EdDSA", k.edOther, obj{"kid": "k2"}, baseClaims(issJ1)))
		if n := srv.hits.Load(); n != 2 {
			t.Fatalf("fetches = %d, want 2", n)
		}
	})
}

// TestJWKSUnknownKidFloodIsRateLimited: 1 000 random kids (sequential and
// concurrent) cause at most one refresh per cooldown; the cooldown is
// counted from the last triggered refresh whatever the cache holds.
func TestJWKSUnknownKidFloodIsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		now := bubbleNow()
		logs := &logBuffer{}
		a := newJWKSAuth(t, now, logs, JWKSOptions{Cooldown: 5 * time.Minute}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		if err := a.Ready(context.Background()); err != nil {
			t.Fatal(err)
		}
		claims := baseClaims(issJ1)
		var wg sync.WaitGroup
		for g := 0; g < 10; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					kid := fmt.Sprintf("rand-%016x", rand.Uint64())
					_, err := a.verifyToken(context.Background(), mint(t, "EdDSA", k.ed, obj{"kid": kid}, claims))
					var ae *AuthError
					if !errors.As(err, &ae) || ae.Description != "unknown key id" {
						t.Errorf("random kid: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if n := srv.hits.Load(); n != 2 {
			t.Fatalf("after 1000 unknown kids: %d fetches, want 2 (initial + one refresh)", n)
		}
		advance(4*time.Minute + 59*time.Second)
		verifyDesc(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "again"}, claims), "unknown key id")
		if n := srv.hits.Load(); n != 2 {
			t.Fatalf("refresh inside the cooldown: %d fetches", n)
		}
		advance(time.Second)
		verifyDesc(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "again"}, claims), "unknown key id")
		if n := srv.hits.Load(); n != 3 {
			t.Fatalf("after the cooldown: %d fetches, want 3", n)
		}
		// Kid path traversal and other hostile kids are map keys, never paths.
		for _, kid := range []string{"../../../../etc/passwd", "..%2f..%2fjwks", "/dev/zero", "k1\x00", strings.Repeat("k", 4000)} {
			verifyDesc(t, a, mint(t, "EdDSA", k.ed, obj{"kid": kid}, claims), "unknown key id")
		}
		if n := srv.hits.Load(); n != 3 {
			t.Fatalf("hostile kids: %d fetches, want 3", n)
		}
	})
}

// TestJWKSCooldownSurvivesEmptyCache: with the source down and nothing
// cached, requests get 503 and the unknown-kid cooldown still holds (a
// cooldown that resets when the cache is empty is no cooldown).
func TestJWKSCooldownSurvivesEmptyCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		srv.setStatus(http.StatusInternalServerError)
		now := bubbleNow()
		logs := &logBuffer{}
		a := newJWKSAuth(t, now, logs, JWKSOptions{Retry: 30 * time.Second}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		tok := mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1))
		verifyDesc(t, a, tok, "503") // waits for the initial fetch, which fails
		a.set(issJ1).waitAttempts(t, 1)
		verifyDesc(t, a, tok, "503") // triggers the one refresh of this cooldown
		a.set(issJ1).waitAttempts(t, 2)
		for i := 0; i < 200; i++ {
			verifyDesc(t, a, tok, "503")
		}
		if n := srv.hits.Load(); n != 2 {
			t.Fatalf("fetches = %d, want 2", n)
		}
		if !strings.Contains(logs.String(), "JWK Set fetch failed") {
			t.Errorf("fetch failure not logged: %s", logs)
		}
		// The background retry recovers without any request.
		srv.setStatus(http.StatusOK)
		advance(30 * time.Second)
		a.set(issJ1).waitAttempts(t, 3)
		verifyOK(t, a, tok)
		if n := srv.hits.Load(); n != 3 {
			t.Fatalf("fetches = %d, want 3", n)
		}
	})
}

// TestJWKSOutageKeepsLastGoodSet: every kind of failed refresh keeps the
// previous set.
func TestJWKSOutageKeepsLastGoodSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		now := bubbleNow()
		logs := &logBuffer{}
		a := newJWKSAuth(t, now, logs, JWKSOptions{Refresh: time.Minute, Retry: time.Minute, MaxBytes: 4096}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		if err := a.Ready(context.Background()); err != nil {
			t.Fatal(err)
		}
		set := a.set(issJ1)
		tok := mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1).with("exp", testNow.Add(24*time.Hour).Unix()))
		failures := []struct {
			name  string
			apply func()
			log   string
		}{
			{"500", func() { srv.setStatus(500) }, "unexpected HTTP status 500"},
			{"404", func() { srv.setStatus(404) }, "unexpected HTTP status 404"},
			{"not JSON", func() { srv.setStatus(200); srv.setBody([]byte("<html>")) }, "not a JSON object"},
			{"empty set", func() { srv.setKeys() }, "no key usable"},
			{"only an HMAC key", func() { srv.setKeys(jwk("k1", "HS256", k.hmac)) }, "no key usable"},
			{"oversized", func() { srv.setBody([]byte(`{"keys":[],"pad":"` + strings.Repeat("x", 5000) + `"}`)) }, "exceeds the size cap"},
			{"duplicate kid", func() { srv.setKeys(jwk("k2", "EdDSA", k.ed.Public()), jwk("k2", "EdDSA", k.edOther.Public())) }, "same kid"},
		}
		for i, f := range failures {
			f.apply()
			advance(time.Minute)
			set.waitAttempts(t, i+2)
			if _, err := a.verifyToken(context.Background(), tok); err != nil {
				t.Fatalf("%s: last good set not kept: %v", f.name, err)
			}
			if !strings.Contains(logs.String(), f.log) {
				t.Fatalf("%s: log lacks %q:\n%s", f.name, f.log, logs)
			}
		}
	})
}

// TestJWKSSlowResponse: a hung key server never holds a request longer
// than MissWait; once the fetch completes, tokens verify.
func TestJWKSSlowResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		release := srv.hold()
		defer release()
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{MissWait: 50 * time.Millisecond, Timeout: 10 * time.Second}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		tok := mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1))
		start := time.Now()
		verifyDesc(t, a, tok, "503")
		if el := time.Since(start); el != 50*time.Millisecond {
			t.Fatalf("request held %v by a slow key server; want MissWait, 50ms", el)
		}
		// A request's own deadline is honoured too.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := a.verifyToken(ctx, tok); !isUnavailable(err) {
			t.Fatalf("err = %v, want unavailable", err)
		}
		release()
		a.set(issJ1).waitAttempts(t, 1)
		verifyOK(t, a, tok)
		if n := srv.hits.Load(); n != 1 {
			t.Fatalf("fetches = %d, want 1 (requests wait for the fetch in flight)", n)
		}
	})
}

// TestJWKSFetchTimeout: a key server slower than Timeout fails the fetch.
func TestJWKSFetchTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		release := srv.hold()
		defer release()
		now := bubbleNow()
		logs := &logBuffer{}
		a := newJWKSAuth(t, now, logs, JWKSOptions{Timeout: 100 * time.Millisecond}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		err := a.Ready(context.Background())
		if !isUnavailable(err) || !strings.Contains(err.Error(), issJ1) {
			t.Fatalf("Ready = %v", err)
		}
		if !strings.Contains(logs.String(), "exceeded") {
			t.Errorf("timeout not logged: %s", logs)
		}
	})
}

// TestJWKSRedirectToPlainHTTPRefused: with a client of the caller's that
// follows redirects, a set reached through a redirect to plain http on a
// host that is not loopback is refused (logged, nothing cached), as such a
// JWKSURL is; through a redirect to https, or to http on a loopback host,
// it is taken.
func TestJWKSRedirectToPlainHTTPRefused(t *testing.T) {
	k := getKeys(t)
	body := must(json.Marshal(obj{"keys": []obj{jwk("k1", "EdDSA", k.ed.Public())}}))
	for _, c := range []struct {
		target string
		ok     bool
	}{
		{"http://keys.example/jwks.json", false},
		{"https://keys.example/jwks.json", true},
		{"http://127.0.0.1:1/jwks.json", true},
	} {
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			rec := httptest.NewRecorder()
			if r.URL.Host == "idp.example" {
				http.Redirect(rec, r, c.target, http.StatusFound)
			} else {
				rec.Header().Set("Content-Type", "application/jwk-set+json")
				_, _ = rec.Write(body)
			}
			resp := rec.Result()
			resp.Request = r
			return resp, nil
		})
		logs := &logBuffer{}
		rec := IssuerRecord{Issuer: issJ1, Tenant: "j1", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: "https://idp.example/jwks.json"}
		a := newNetJWKSAuth(t, fixedNow, logs, JWKSOptions{Client: &http.Client{Transport: rt}}, rec)
		err := a.Ready(context.Background())
		if (err == nil) != c.ok {
			t.Errorf("redirect to %s: Ready = %v, want ok %v", c.target, err, c.ok)
		}
		if want := "redirected: http is allowed only for loopback hosts; use https"; !c.ok && !strings.Contains(logs.String(), want) {
			t.Errorf("redirect to %s: log lacks %q:\n%s", c.target, want, logs)
		}
	}
}

// TestJWKSOversizedBody: bodies over MaxBytes are refused whether or not
// Content-Length announces them, and nothing is cached (503).
func TestJWKSOversizedBody(t *testing.T) {
	k := getKeys(t)
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			big := []byte(`{"keys":[` + strings.Repeat(`{"kty":"oct","k":"AAAA"},`, 100000) + `{"kty":"oct","k":"AAAA"}]}`)
			var hits int
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits++
				if chunked {
					w.(http.Flusher).Flush() // no Content-Length
				}
				_, _ = w.Write(big)
			}))
			defer srv.Close()
			logs := &logBuffer{}
			a := newNetJWKSAuth(t, fixedNow, logs, JWKSOptions{MaxBytes: 64 << 10},
				IssuerRecord{Issuer: issJ1, Tenant: "j1", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: srv.URL})
			verifyDesc(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1)), "503")
			if !strings.Contains(logs.String(), "exceeds the size cap") {
				t.Fatalf("log: %s", logs)
			}
		})
	}
}

// TestJWKSKeyBoundToOneAlgorithm: a JWK with alg RS256 never verifies a
// PS256 token, even with the right kid and the same RSA key; an RSA JWK
// without alg in a record allowing RS256 and PS256 is ambiguous and unusable.
func TestJWKSKeyBoundToOneAlgorithm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("rs", "RS256", &k.rsa.PublicKey), jwk("ambiguous", "", &k.rsaOther.PublicKey),
			jwk("ed-as-es", "ES256", k.ed.Public()))
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{}, jwksRecord(issJ1, "j1", srv, "RS256", "PS256", "EdDSA", "ES256"))
		c := baseClaims(issJ1)
		verifyOK(t, a, mint(t, "RS256", k.rsa, obj{"kid": "rs"}, c))
		verifyDesc(t, a, mint(t, "PS256", k.rsa, obj{"kid": "rs"}, c), "token algorithm does not match its key")
		verifyDesc(t, a, mint(t, "RS256", k.rsaOther, obj{"kid": "ambiguous"}, c), "token key is not usable for this issuer")
		verifyDesc(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "ed-as-es"}, c), "token key is not usable for this issuer")
		if n := srv.hits.Load(); n != 1 {
			t.Fatalf("unusable kids must not trigger refreshes: %d fetches", n)
		}
	})
}

// TestParseJWKS pins which JWKs are used, ignored, or fail the set.
func TestParseJWKS(t *testing.T) {
	k := getKeys(t)
	ed := jwk("ed", "EdDSA", k.ed.Public())
	algs := []string{"EdDSA", "RS256", "ES256"}
	tests := []struct {
		name     string
		keys     []obj
		raw      string
		usable   []string
		unusable []string
		kidless  int // usable keys without kid
		err      error
	}{
		{name: "plain", keys: []obj{ed}, usable: []string{"ed"}},
		{name: "use enc ignored", keys: []obj{ed, jwk("enc", "", &k.rsa.PublicKey).with("use", "enc")}, usable: []string{"ed"}, unusable: []string{"enc"}},
		{name: "use sig kept", keys: []obj{jwk("s", "", &k.rsa.PublicKey).with("use", "sig")}, usable: []string{"s"}},
		{name: "key_ops without verify", keys: []obj{ed, jwk("ops", "", &k.rsa.PublicKey).with("key_ops", []string{"encrypt"})}, usable: []string{"ed"}, unusable: []string{"ops"}},
		{name: "oct key ignored", keys: []obj{ed, jwk("oct", "HS256", k.hmac)}, usable: []string{"ed"}, unusable: []string{"oct"}},
		{name: "private d ignored", keys: []obj{ed, jwk("priv", "EdDSA", k.edOther.Public()).with("d", b64.EncodeToString(k.edOther.Seed()))}, usable: []string{"ed"}, unusable: []string{"priv"}},
		{name: "RSA 1024 ignored", keys: []obj{ed, jwk("weak", "RS256", &k.rsa1024.PublicKey)}, usable: []string{"ed"}, unusable: []string{"weak"}},
		{name: "RSA 8192", keys: []obj{jwk("big", "RS256", rsaModulus(t, 8192))}, usable: []string{"big"}},
		{name: "RSA over 8192 ignored", keys: []obj{ed, jwk("huge", "RS256", rsaModulus(t, 8200))}, usable: []string{"ed"}, unusable: []string{"huge"}},
		{name: "P-384 not in record", keys: []obj{ed, jwk("p384", "", &k.es384.PublicKey)}, usable: []string{"ed"}, unusable: []string{"p384"}},
		{name: "alg not in record", keys: []obj{ed, jwk("ps", "PS256", &k.rsa.PublicKey)}, usable: []string{"ed"}, unusable: []string{"ps"}},
		{name: "alg none", keys: []obj{ed, jwk("none", "none", &k.rsa.PublicKey)}, usable: []string{"ed"}, unusable: []string{"none"}},
		{name: "unknown kty", keys: []obj{ed, {"kty": "XYZ", "kid": "xyz"}}, usable: []string{"ed"}, unusable: []string{"xyz"}},
		{name: "x5c and x5u never read", keys: []obj{jwk("x", "", &k.rsa.PublicKey).with("x5c", []string{"!!not base64"}, "x5u", "https://evil.example/cert")}, usable: []string{"x"}},
		{name: "duplicate member", raw: `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"ed","kid":"x","x":"` + ed["x"].(string) + `"}]}`, err: errJWKSNoKeys},
		{name: "duplicate kid", keys: []obj{ed, ed}, err: errJWKSDupKID},
		{name: "no usable key", keys: []obj{jwk("oct", "", k.hmac)}, err: errJWKSNoKeys},
		{name: "one key without kid", keys: []obj{jwk("", "EdDSA", k.ed.Public())}, kidless: 1},
		{name: "two keys without kid", keys: []obj{jwk("", "EdDSA", k.ed.Public()), jwk("", "EdDSA", k.edOther.Public())}, err: errJWKSNoKeys},
		{name: "a key without kid beside one with", keys: []obj{ed, jwk("", "EdDSA", k.edOther.Public())}, usable: []string{"ed"}, kidless: 1},
		{name: "an empty kid is no kid", keys: []obj{jwk("", "EdDSA", k.ed.Public()).with("kid", "")}, kidless: 1},
		{name: "an empty kid beside a key without kid", keys: []obj{jwk("", "EdDSA", k.ed.Public()).with("kid", ""), jwk("", "EdDSA", k.edOther.Public())}, err: errJWKSNoKeys},
		{name: "two empty kids", keys: []obj{jwk("", "EdDSA", k.ed.Public()).with("kid", ""), jwk("", "EdDSA", k.edOther.Public()).with("kid", "")}, err: errJWKSNoKeys},
		{name: "too many keys", keys: func() []obj {
			var l []obj
			for i := 0; i < 5; i++ {
				l = append(l, jwk(fmt.Sprint(i), "EdDSA", k.ed.Public()))
			}
			return l
		}(), err: errJWKSTooMany},
		{name: "not an object", raw: `[]`, err: errJWKSMalformed},
		{name: "keys not an array", raw: `{"keys":{}}`, err: errJWKSMalformed},
		{name: "duplicate keys member", raw: `{"keys":[],"keys":[]}`, err: errJWKSMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.raw)
			if tt.raw == "" {
				list := make([]any, len(tt.keys))
				for i, o := range tt.keys {
					list[i] = map[string]any(o)
				}
				body = must(json.Marshal(map[string]any{"keys": list}))
			}
			snap, err := parseJWKS(body, algs, 4)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, kid := range tt.usable {
				if _, ok := snap.byKID[kid]; !ok {
					t.Errorf("kid %q not usable", kid)
				}
			}
			for _, kid := range tt.unusable {
				if _, ok := snap.unusable[kid]; !ok {
					t.Errorf("kid %q not marked unusable", kid)
				}
			}
			if len(snap.byKID) != len(tt.usable) {
				t.Errorf("usable = %d keys, want %d", len(snap.byKID), len(tt.usable))
			}
			// One usable key, with a kid or without, serves the tokens
			// without kid too.
			if wantOnly := len(tt.usable)+tt.kidless == 1; (snap.only != nil) != wantOnly {
				t.Errorf("a key for tokens without kid: %v, want %v", snap.only != nil, wantOnly)
			}
		})
	}
}

// TestJWKSNeverFetchesX5U: a JWK's x5u is not fetched, and a token's jku is
// refused before any fetch.
func TestJWKSNeverFetchesX5U(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		evil := newJWKSServer(t) // reachable through the same client: a fetch would count
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()).with("x5u", evil.URL+"/cert.pem"))
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		verifyOK(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1)))
		verifyDesc(t, a, mint(t, "EdDSA", k.edOther, obj{"kid": "k1", "jku": evil.URL + "/jwks"}, baseClaims(issJ1)), "token header parameter is not allowed")
		if n := evil.hits.Load(); n != 0 {
			t.Fatalf("attacker URL fetched %d times", n)
		}
	})
}

// TestJWKSNoKidSingleKey: a token without kid uses the set's only key and
// is refused when the set has several.
func TestJWKSNoKidSingleKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{Refresh: time.Minute}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		noKID := mint(t, "EdDSA", k.ed, nil, baseClaims(issJ1).with("exp", testNow.Add(time.Hour).Unix()))
		verifyOK(t, a, noKID)
		srv.setKeys(jwk("k1", "EdDSA", k.ed.Public()), jwk("k2", "EdDSA", k.edOther.Public()))
		advance(time.Minute)
		a.set(issJ1).waitAttempts(t, 2)
		verifyDesc(t, a, noKID, "token has no key id and the issuer has several keys")
	})
}

// TestJWKSCloseStopsRefresh: after Close nothing is fetched; cached keys
// keep working; an issuer never fetched is unavailable.
func TestJWKSCloseStopsRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		srv2 := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		now := bubbleNow()
		a := newJWKSAuth(t, now, nil, JWKSOptions{}, jwksRecord(issJ1, "j1", srv, "EdDSA"), jwksRecord(issJ2, "j2", srv2, "EdDSA"))
		tok := mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1))
		verifyOK(t, a, tok)
		_ = a.Close()
		_ = a.Close()
		advance(24 * time.Hour)
		verifyOK(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1).with("exp", now().Add(time.Hour).Unix())))
		verifyDesc(t, a, mint(t, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ2).with("exp", now().Add(time.Hour).Unix())), "503")
		if srv.hits.Load() != 1 || srv2.hits.Load() != 0 {
			t.Fatalf("fetches after Close: %d, %d", srv.hits.Load(), srv2.hits.Load())
		}
	})
}

// TestJWKSNoFetchAtConstruction: building the authenticator (as `demo
// check` does) performs no I/O.
func TestJWKSNoFetchAtConstruction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newJWKSServer(t)
		now := bubbleNow()
		newJWKSAuth(t, now, nil, JWKSOptions{}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		advance(2 * time.Hour) // past any refresh: nothing was started
		if n := srv.hits.Load(); n != 0 {
			t.Fatalf("fetches at construction: %d", n)
		}
	})
}

// TestJWKSRedirectNotFollowed: the default client refuses redirects.
func TestJWKSRedirectNotFollowed(t *testing.T) {
	k := getKeys(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"keys":[` + jwk("k1", "EdDSA", k.ed.Public()).json() + `]}`))
	}))
	defer srv.Close()
	redir := httptest.NewServer(http.RedirectHandler(srv.URL, http.StatusFound))
	defer redir.Close()
	a := newNetJWKSAuth(t, fixedNow, nil, JWKSOptions{},
		IssuerRecord{Issuer: issJ1, Tenant: "j1", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: redir.URL})
	if err := a.Ready(context.Background()); !isUnavailable(err) || !strings.Contains(err.Error(), "302") {
		t.Fatalf("Ready = %v", err)
	}
	if hits.Load() != 0 {
		t.Fatal("redirect followed")
	}
}

func TestJWKSConfigErrors(t *testing.T) {
	k := getKeys(t)
	rec := func(mut func(*IssuerRecord)) IssuerRecord {
		r := IssuerRecord{Issuer: "https://i.example/", Tenant: "t", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: "https://i.example/jwks"}
		mut(&r)
		return r
	}
	tests := []struct {
		name string
		cfg  JWTConfig
		want string // the whole error text
	}{
		{"http to a remote host", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) { r.JWKSURL = "http://idp.example/jwks" })}}, `issuers[0] ("https://i.example/").jwks_url: http is allowed only for loopback hosts; use https`},
		{"relative URL", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) { r.JWKSURL = "/jwks" })}}, `issuers[0] ("https://i.example/").jwks_url: must be an absolute URL with a host and no fragment`},
		{"ftp", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) { r.JWKSURL = "ftp://i.example/jwks" })}}, `issuers[0] ("https://i.example/").jwks_url: scheme "ftp" is not https`},
		{"keys and URL", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) { r.Keys = []VerificationKey{{Key: k.ed.Public()}} })}}, `issuers[0] ("https://i.example/"): set either keys or jwks_url, not both`},
		{"refresh too small", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) { r.JWKSRefresh = time.Millisecond })}}, `issuers[0] ("https://i.example/").jwks_refresh: 1ms is below 1s`},
		{"refresh without URL", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) {
			r.JWKSURL, r.JWKSRefresh, r.Keys = "", time.Hour, []VerificationKey{{Key: k.ed.Public()}}
		})}}, `issuers[0] ("https://i.example/").jwks_refresh: only allowed with jwks_url`},
		{"no keys at all", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) { r.JWKSURL = "" })}}, `issuers[0] ("https://i.example/").keys: none configured (set keys or jwks_url)`},
		{"bad type", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) { r.Typ = "at jwt" })}}, `issuers[0] ("https://i.example/").typ: "at jwt" is not a media type such as at+jwt`},
		{"options", JWTConfig{Issuers: []IssuerRecord{rec(func(*IssuerRecord) {})}, JWKS: JWKSOptions{MaxBytes: 10, Cooldown: time.Millisecond, MissWait: time.Hour, Timeout: -1}},
			"jwks.timeout: -1ns is outside (0, 5m]\njwks.max_bytes: 10 is outside [1 KiB, 16 MiB]\njwks.cooldown: 1ms is below 1s\njwks.miss_wait: 1h0m0s is outside (0, 30s]"},
		{"ambiguous static RSA key", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) {
			r.JWKSURL, r.Algorithms, r.Keys = "", []string{"RS256", "PS256"}, []VerificationKey{{KID: "r", Key: &k.rsa.PublicKey}}
		})}}, `issuers[0] ("https://i.example/").keys[0] ("r"): usable with several algorithms [RS256 PS256]: set alg to bind it to one (RFC 8725 §3.1)`},
		{"alg not usable", JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) {
			r.JWKSURL, r.Algorithms, r.Keys = "", []string{"RS256", "EdDSA"}, []VerificationKey{{KID: "r", Key: &k.rsa.PublicKey, Alg: "EdDSA"}}
		})}}, `issuers[0] ("https://i.example/").keys[0] ("r").alg: "EdDSA" is not one of the record's algorithms usable with a RSA key [RS256]` + "\n" +
			`issuers[0] ("https://i.example/").algorithms[1]: EdDSA has no compatible key (HS* needs an HMAC secret, RS*/PS* an RSA key, ES* an ECDSA key on its curve, EdDSA an Ed25519 key)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewJWTAuthenticator(tt.cfg)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	// Loopback http is fine.
	for _, u := range []string{"http://127.0.0.1:1/jwks", "http://[::1]:1/jwks", "http://localhost/jwks", "https://user:pw@i.example/jwks"} {
		if _, err := NewJWTAuthenticator(JWTConfig{Issuers: []IssuerRecord{rec(func(r *IssuerRecord) { r.JWKSURL = u })}}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}

// TestJWKSLogRedactsURLPassword: fetch failures are logged with the URL's
// password redacted.
func TestJWKSLogRedactsURLPassword(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newJWKSServer(t)
		srv.setStatus(500)
		now := bubbleNow()
		logs := &logBuffer{}
		u := strings.Replace(srv.URL, "http://", "http://user:hunter2-secret@", 1)
		a := newJWKSAuth(t, now, logs, JWKSOptions{},
			IssuerRecord{Issuer: issJ1, Tenant: "j1", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: u})
		_ = a.Ready(context.Background())
		if strings.Contains(logs.String(), "hunter2-secret") || !strings.Contains(logs.String(), "500") {
			t.Fatalf("log: %s", logs)
		}
	})
}

// TestJWKSTransportErrorRedactsURLQuery: a fetch that fails in transport
// (nothing listens) is logged, and reported by Ready, with the URL's query
// left out: net/http's error quotes the whole URL but its password.
func TestJWKSTransportErrorRedactsURLQuery(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String() + "/jwks.json?api_key=SECRET"
	ln.Close()
	logs := &logBuffer{}
	a := newNetJWKSAuth(t, fixedNow, logs, JWKSOptions{},
		IssuerRecord{Issuer: issJ1, Tenant: "j1", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, JWKSURL: u})
	rerr := a.Ready(context.Background())
	if rerr == nil || strings.Contains(rerr.Error(), "SECRET") {
		t.Errorf("Ready: %v; want an error without the query", rerr)
	}
	if strings.Contains(logs.String(), "SECRET") || !strings.Contains(logs.String(), `/jwks.json?…`) {
		t.Errorf("log: %s", logs)
	}
}

// TestJWKSSameNewKidTogether: two tokens with the same newly published
// kid. The first triggers the refresh; the second, arriving before the
// loop has taken that kick up, waits for the same fetch (it is in flight
// from the kick on) rather than getting 401 at once under the cooldown.
// The test plays the set's loop (marked started, no goroutine), so that
// the second token comes exactly in that window.
func TestJWKSSameNewKidTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := getKeys(t)
		srv := newJWKSServer(t, jwk("k1", "EdDSA", k.ed.Public()))
		a := newJWKSAuth(t, bubbleNow(), nil, JWKSOptions{}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		set := a.set(issJ1)
		set.mu.Lock()
		set.started, set.inflight = true, true // as start does, without the loop
		set.mu.Unlock()
		set.finish(set.fetch()) // the first fetch
		srv.setKeys(jwk("k1", "EdDSA", k.ed.Public()), jwk("k2", "EdDSA", k.edOther.Public()))
		tok := mint(t, "EdDSA", k.edOther, obj{"kid": "k2"}, baseClaims(issJ1))
		r1 := make(chan error, 1)
		go func() { _, err := a.verifyToken(context.Background(), tok); r1 <- err }()
		synctest.Wait() // R1 has kicked and waits for the fetch
		if len(set.kick) != 1 {
			t.Fatal("the first token did not kick the loop")
		}
		r2 := make(chan error, 1)
		go func() { _, err := a.verifyToken(context.Background(), tok); r2 <- err }() // same kid, same moment
		synctest.Wait()
		// The second must wait for the fetch the first triggered, which the
		// loop has not taken up: an answer now is the bug (a 401 under the
		// cooldown the first just spent).
		select {
		case err := <-r2:
			t.Fatalf("second token answered before the triggered fetch could run: %v", err)
		default:
		}
		<-set.kick // the loop takes the kick up and fetches
		set.mu.Lock()
		set.inflight = true
		set.mu.Unlock()
		set.finish(set.fetch())
		err1, err2 := <-r1, <-r2
		if err1 != nil || err2 != nil || srv.hits.Load() != 2 {
			t.Errorf("first %v, second %v, fetches %d; want both verified by one refresh (2 fetches)", err1, err2, srv.hits.Load())
		}
	})
}
