package identity

import (
	"context"
	"net/http"
	"testing"
)

// Verification cost per algorithm, on the full verifyToken path (length
// cap, strict header and claims decoding, issuer selection, key lookup,
// signature, claims validation). RS256 uses a 2048-bit key; the JWKS
// variant reads its key from a fetched set (after the first fetch, a map
// lookup like the static case).
func BenchmarkVerify(b *testing.B) {
	a, k := newTestAuthenticator(b)
	cases := []struct {
		name string
		tok  string
	}{
		{"RS256", mint(b, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with("tenant", "t1"))},
		{"ES256", mint(b, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "cli-1"))},
		{"EdDSA", mint(b, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))},
		{"HS256", mint(b, "HS256", k.hmac, nil, baseClaims(issH))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.verifyToken(ctx, c.tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("EdDSA-JWKS", func(b *testing.B) {
		srv := newJWKSServer(b, jwk("k1", "EdDSA", k.ed.Public()))
		ja := newJWKSAuth(b, fixedNow, nil, JWKSOptions{}, jwksRecord(issJ1, "j1", srv, "EdDSA"))
		tok := mint(b, "EdDSA", k.ed, obj{"kid": "k1"}, baseClaims(issJ1))
		ctx := context.Background()
		if _, err := ja.verifyToken(ctx, tok); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ja.verifyToken(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAPIKey: a valid key, an unknown id and a wrong secret should
// cost the same (one checksum, one lookup, one HMAC-SHA256, one
// constant-time comparison); a typo costs only the checksum.
func BenchmarkAPIKey(b *testing.B) {
	a, key, _, _ := newAPIKeyFixture(b)
	unknown, _, _ := NewAPIKey(testPepper, "acme", "ghost")
	s := []byte(key[:len(key)-apiKeyChecksumLen])
	s[30] = map[bool]byte{true: 'x', false: 'y'}[s[30] != 'x']
	wrong := string(s) + checksum(string(s))
	typo := key[:len(key)-1] + map[bool]string{true: "0", false: "1"}[key[len(key)-1] != '0']
	ctx := context.Background()
	for _, c := range []struct {
		name string
		key  string
		ok   bool
	}{{"valid", key, true}, {"unknown-id", unknown, false}, {"wrong-secret", wrong, false}, {"typo", typo, false}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.verifyKey(ctx, c.key); (err == nil) != c.ok {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("combined-X-API-Key", func(b *testing.B) {
		c, err := NewCombinedAuthenticator(CombinedConfig{APIKeys: a})
		if err != nil {
			b.Fatal(err)
		}
		r := headerRequest(http.Header{"X-Api-Key": {key}}).WithContext(ctx)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Authenticate(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkVerifyRepeated: one client presenting the same token on every
// request, with the verification cache disabled (every request pays the
// full path of BenchmarkVerify) and enabled (the default: a keyed hash of
// the token, a read-locked map lookup, a comparison with the stored copy and
// the validity checks).
// "cached-parallel" runs the cached case from GOMAXPROCS goroutines.
func BenchmarkVerifyRepeated(b *testing.B) {
	k := getKeys(b)
	cases := []struct {
		name string
		tok  string
	}{
		{"ES256", mint(b, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "cli-1"))},
		{"RS256", mint(b, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with("tenant", "t1"))},
		{"EdDSA", mint(b, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))},
	}
	build := func(size int) *JWTAuthenticator {
		cfg := testConfig(k)
		cfg.CacheSize = size
		a, err := NewJWTAuthenticator(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	uncached, cached := build(-1), build(0)
	ctx := context.Background()
	for _, c := range cases {
		for _, v := range []struct {
			name string
			a    *JWTAuthenticator
		}{{"uncached", uncached}, {"cached", cached}} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				if _, err := v.a.verifyToken(ctx, c.tok); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := v.a.verifyToken(ctx, c.tok); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(c.name+"/cached-parallel", func(b *testing.B) {
			if _, err := cached.verifyToken(ctx, c.tok); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cached.verifyToken(ctx, c.tok); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkBearerToken: extracting an ES256 token from the Authorization
// header, which checks every byte against the b64token charset; that scan
// is paid only by tokens the verification cache does not answer
// (JWTAuthenticator.Authenticate, BenchmarkAuthenticateCached).
func BenchmarkBearerToken(b *testing.B) {
	k := getKeys(b)
	tok := mint(b, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "cli-1"))
	h := http.Header{"Authorization": {"Bearer " + tok}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bearerToken(h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAuthenticateCached: JWTAuthenticator.Authenticate on a request
// whose ES256 token is in the verification cache, the request path's
// common case (BenchmarkBearerToken and BenchmarkVerifyRepeated's cached
// case measure its two halves apart).
func BenchmarkAuthenticateCached(b *testing.B) {
	k := getKeys(b)
	a, err := NewJWTAuthenticator(testConfig(k))
	if err != nil {
		b.Fatal(err)
	}
	tok := mint(b, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "cli-1"))
	r := headerRequest(http.Header{"Authorization": {"Bearer " + tok}})
	if _, err := a.Authenticate(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Authenticate(r); err != nil {
			b.Fatal(err)
		}
	}
}
