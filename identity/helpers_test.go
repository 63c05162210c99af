package identity

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/internal/jwkey"
)

// testNow is the fixed clock of every JWT test.
var testNow = time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)

// testKeys holds key pairs generated once per test binary (RSA generation
// is slow); no key material is read from disk or the network.
type testKeys struct {
	ed, edOther, edC, edD ed25519.PrivateKey
	es, es384             *ecdsa.PrivateKey
	rsa, rsaOther         *rsa.PrivateKey
	rsa1024               *rsa.PrivateKey
	hmac                  []byte
}

var (
	keysOnce sync.Once
	keys     testKeys
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func getKeys(tb testing.TB) *testKeys {
	tb.Helper()
	keysOnce.Do(func() {
		gen := func() ed25519.PrivateKey {
			_, k := must2(ed25519.GenerateKey(rand.Reader))
			return k
		}
		keys.ed, keys.edOther, keys.edC, keys.edD = gen(), gen(), gen(), gen()
		keys.es = must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
		keys.es384 = must(ecdsa.GenerateKey(elliptic.P384(), rand.Reader))
		keys.rsa = must(rsa.GenerateKey(rand.Reader, 2048))
		keys.rsaOther = must(rsa.GenerateKey(rand.Reader, 2048))
		keys.rsa1024 = must(rsa.GenerateKey(rand.Reader, 1024))
		keys.hmac = make([]byte, 32)
		must(rand.Read(keys.hmac))
	})
	return &keys
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

// Issuers of the test configuration.
const (
	issA = "https://a.example/" // fixed tenant, EdDSA + ES256, two keys
	issB = "https://b.example/" // tenant claim, RS256
	issH = "https://h.example/" // HS256, single key without kid
	issC = "https://c.example/" // EdDSA, kid "k1"
	issD = "https://d.example/" // EdDSA, kid "k1" (different key)
)

func testConfig(k *testKeys) JWTConfig {
	return JWTConfig{
		Now: func() time.Time { return testNow },
		Issuers: []IssuerRecord{
			{
				Issuer: issA, Tenant: "acme", Audiences: []string{"api"},
				Algorithms: []string{"EdDSA", "ES256"},
				Keys: []VerificationKey{
					{KID: "a-ed", Key: k.ed.Public()},
					{KID: "a-es", Key: &k.es.PublicKey},
				},
			},
			{
				Issuer: issB, TenantClaim: "tenant", Tenants: []string{"t1", "t2"},
				Audiences: []string{"api", "api2"}, Algorithms: []string{"RS256"},
				Keys: []VerificationKey{{KID: "b-rsa", Key: &k.rsa.PublicKey}},
			},
			{
				Issuer: issH, Tenant: "hmac", Audiences: []string{"api"},
				Algorithms: []string{"HS256"},
				Keys:       []VerificationKey{{Key: k.hmac}},
			},
			{
				Issuer: issC, Tenant: "tc", Audiences: []string{"api"},
				Algorithms: []string{"EdDSA"},
				Keys:       []VerificationKey{{KID: "k1", Key: k.edC.Public()}},
			},
			{
				Issuer: issD, Tenant: "td", Audiences: []string{"api"},
				Algorithms: []string{"EdDSA"},
				Keys:       []VerificationKey{{KID: "k1", Key: k.edD.Public()}},
			},
		},
	}
}

func newTestAuthenticator(tb testing.TB) (*JWTAuthenticator, *testKeys) {
	tb.Helper()
	k := getKeys(tb)
	a, err := NewJWTAuthenticator(testConfig(k))
	if err != nil {
		tb.Fatalf("NewJWTAuthenticator: %v", err)
	}
	return a, k
}

var b64 = base64.RawURLEncoding

// signRaw builds a compact JWS from exact header and payload JSON text and
// signs it with method and key (method nil: empty signature, as alg none).
func signRaw(tb testing.TB, method jwt.SigningMethod, key any, header, payload string) string {
	tb.Helper()
	s := b64.EncodeToString([]byte(header)) + "." + b64.EncodeToString([]byte(payload))
	if method == nil {
		return s + "."
	}
	sig, err := method.Sign(s, key)
	if err != nil {
		tb.Fatalf("sign: %v", err)
	}
	return s + "." + b64.EncodeToString(sig)
}

// obj is a JSON object literal helper for headers and claims.
type obj map[string]any

func (o obj) with(kv ...any) obj {
	out := obj{}
	for k, v := range o {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func (o obj) json() string { return string(must(json.Marshal(map[string]any(o)))) }

// mint signs claims with header {alg, kid?} plus extra header fields.
func mint(tb testing.TB, alg string, key any, hdr obj, claims obj) string {
	tb.Helper()
	m, err := jwkey.SigningMethodFor(alg)
	if err != nil {
		tb.Fatal(err)
	}
	h := obj{"alg": alg, "typ": "JWT"}.with()
	for k, v := range hdr {
		h[k] = v
	}
	return signRaw(tb, m, key, h.json(), claims.json())
}

// baseClaims are valid claims for issuer iss at testNow.
func baseClaims(iss string) obj {
	return obj{
		"iss": iss, "sub": "alice", "aud": "api",
		"exp": testNow.Add(time.Hour).Unix(),
		"iat": testNow.Add(-time.Minute).Unix(),
	}
}

func pemBytes(tb testing.TB, typ string, der []byte) []byte {
	tb.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func pkixPEM(tb testing.TB, pub any) []byte {
	tb.Helper()
	return pemBytes(tb, "PUBLIC KEY", must(x509.MarshalPKIXPublicKey(pub)))
}

// rsaModulus returns an RSA public key whose modulus is a random odd number
// of exactly bits bits (e 65537): not a product of two primes, so nobody
// can sign for it, but as large as a key of that size, which is all the
// size checks and a verification's cost look at. Generating a real 8192-bit
// key takes seconds to minutes.
func rsaModulus(tb testing.TB, bits int) *rsa.PublicKey {
	tb.Helper()
	n := must(rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), uint(bits))))
	n.SetBit(n, bits-1, 1)
	n.SetBit(n, 0, 1)
	return &rsa.PublicKey{N: n, E: 65537}
}
