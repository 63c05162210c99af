package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/identity"
)

const benchIssuer = "https://issuer.bench.invalid"

// jwtKeys are generated once per process: an ECDSA P-256 key (ES256), an
// RSA 2048-bit key (RS256) and an Ed25519 key is not needed here.
type jwtKey struct {
	alg    string
	method jwt.SigningMethod
	priv   any
	pub    any
}

func newJWTKey(tb testing.TB, alg string) jwtKey {
	tb.Helper()
	switch alg {
	case "ES256":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		return jwtKey{alg, jwt.SigningMethodES256, k, &k.PublicKey}
	case "RS256":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			tb.Fatal(err)
		}
		return jwtKey{alg, jwt.SigningMethodRS256, k, &k.PublicKey}
	}
	tb.Fatalf("unknown alg %s", alg)
	return jwtKey{}
}

// mint signs a token for sub, valid for an hour, with a jti so that two
// tokens for the same subject differ.
func (k jwtKey) mint(tb testing.TB, sub string, jti int) string {
	now := time.Now()
	t := jwt.NewWithClaims(k.method, jwt.MapClaims{"iss": benchIssuer, "sub": sub, "aud": "api",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": fmt.Sprint(jti), "client_id": "app"})
	t.Header["kid"] = "k1"
	s, err := t.SignedString(k.priv)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// jwtConfig is one issuer record trusting k, with the authenticator's
// defaults otherwise (verification cache included, when the library has
// one).
func jwtConfig(k jwtKey) identity.JWTConfig {
	return identity.JWTConfig{Issuers: []identity.IssuerRecord{{
		Issuer: benchIssuer, Tenant: "acme", Audiences: []string{"api"}, Algorithms: []string{k.alg},
		Keys: []identity.VerificationKey{{KID: "k1", Key: k.pub}},
	}}}
}

// withoutCache returns cfg with the verification cache disabled, and false
// when this version of identity.JWTConfig has no CacheSize field. (The
// field is set by reflection so that the suite compiles against library
// versions with and without the cache.)
func withoutCache(cfg identity.JWTConfig) (identity.JWTConfig, bool) {
	f := reflect.ValueOf(&cfg).Elem().FieldByName("CacheSize")
	if !f.IsValid() || f.Kind() != reflect.Int {
		return cfg, false
	}
	f.SetInt(-1)
	return cfg, true
}

// BenchmarkJWT measures identity.JWTAuthenticator.Authenticate (bearer
// extraction and verification) for ES256 and RS256, interleaved:
//   - repeated: the same token on every call, default configuration (with
//     the verification cache, if the library has one, this is a cache hit);
//   - nocache: the same token, cache disabled (JWTConfig.CacheSize = -1);
//     reported only when the library has that option;
//   - fresh: a different token on every call (minted before timing), default
//     configuration: a full verification plus, with a cache, a miss and an
//     insert.
//
// speedup is uncached ns/op over repeated ns/op, uncached being nocache
// when it exists, else fresh. b.N is the number of verifications of each
// kind; minting b.N RS256 tokens takes about 1.5 ms each, so run it with a
// small fixed -benchtime (e.g. 2000x).
func BenchmarkJWT(b *testing.B) {
	for _, alg := range []string{"ES256", "RS256"} {
		b.Run("alg="+alg, func(b *testing.B) {
			k := newJWTKey(b, alg)
			cached, err := identity.NewJWTAuthenticator(jwtConfig(k))
			if err != nil {
				b.Fatal(err)
			}
			defer cached.Close()
			ctx := context.Background()
			repeated := http.Header{"Authorization": {"Bearer " + k.mint(b, "alice", 0)}}
			fresh := make([]http.Header, b.N)
			for i := range fresh {
				fresh[i] = http.Header{"Authorization": {"Bearer " + k.mint(b, "alice", i+1)}}
			}
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
			check := func(a *identity.JWTAuthenticator, h http.Header) {
				req.Header = h
				if p, err := a.Authenticate(req); err != nil || p.Account != "alice" {
					b.Fatalf("Authenticate: %v %v", p, err)
				}
			}
			check(cached, repeated)
			cs := []contender{
				{"repeated", func(n int) {
					for range n {
						check(cached, repeated)
					}
				}},
			}
			if cfg, ok := withoutCache(jwtConfig(k)); ok {
				uncached, err := identity.NewJWTAuthenticator(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer uncached.Close()
				cs = append(cs, contender{"nocache", func(n int) {
					for range n {
						check(uncached, repeated)
					}
				}})
			}
			next := 0
			cs = append(cs, contender{"fresh", func(n int) {
				for range n {
					check(cached, fresh[next])
					next++
				}
			}})
			res := interleave(b, cs, interleaveOptions{})
			b.ReportMetric(res[1].nsOp/res[0].nsOp, "speedup")
		})
	}
}
