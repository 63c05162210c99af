package identity_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/identity"
)

func ExampleJWTAuthenticator_Authenticate() {
	// A deterministic Ed25519 key for the example; real deployments load
	// the issuer's public key with identity.ParsePublicKeyPEM.
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	auth, err := identity.NewJWTAuthenticator(identity.JWTConfig{
		Issuers: []identity.IssuerRecord{{
			Issuer:     "https://login.example.com/",
			Tenant:     "acme",
			Audiences:  []string{"reports-api"},
			Algorithms: []string{"EdDSA"},
			Keys:       []identity.VerificationKey{{KID: "2026-01", Key: priv.Public()}},
		}},
		Now: func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	mint := func(exp time.Time, signer ed25519.PrivateKey) *http.Request {
		t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
			"iss":       "https://login.example.com/",
			"sub":       "alice",
			"aud":       "reports-api",
			"client_id": "reports-cli",
			"exp":       exp.Unix(),
		})
		t.Header["kid"] = "2026-01"
		s, _ := t.SignedString(signer)
		r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
		r.Header.Set("Authorization", "Bearer "+s)
		return r
	}

	p, err := auth.Authenticate(mint(now.Add(time.Hour), priv))
	fmt.Printf("%+v %v\n", p, err)

	_, err = auth.Authenticate(mint(now.Add(-time.Hour), priv))
	fmt.Println(err)

	// A forged token reports the signature failure, whatever its claims.
	forger := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	_, err = auth.Authenticate(mint(now.Add(-time.Hour), forger))
	var ae *identity.AuthError
	if errors.As(err, &ae) {
		fmt.Println(ae.Status(), ae.Code, ae.Description)
	}
	// Output:
	// {Issuer:https://login.example.com/ Tenant:acme Plan: Account:alice CredentialID:reports-cli Method:jwt} <nil>
	// identity: invalid_token: token is expired
	// 401 invalid_token token signature is invalid
}

func ExampleJWTAuthenticator_jwks() {
	// The issuer's signing key and its JWK Set, served over HTTP. (Real
	// deployments point JWKSURL at the identity provider's https endpoint.)
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	jwks := `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"2026-05","alg":"EdDSA","x":"` +
		base64.RawURLEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)) + `"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = io.WriteString(w, jwks)
	}))
	defer srv.Close()

	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	auth, err := identity.NewJWTAuthenticator(identity.JWTConfig{
		Issuers: []identity.IssuerRecord{{
			Issuer:      "https://login.example.com/",
			Tenant:      "acme",
			Audiences:   []string{"reports-api"},
			Algorithms:  []string{"EdDSA"},
			JWKSURL:     srv.URL + "/.well-known/jwks.json", // http only for loopback; use https
			JWKSRefresh: 15 * time.Minute,
			Typ:         "at+jwt", // RFC 9068 access tokens only
		}},
		JWKS: identity.JWKSOptions{Timeout: 5 * time.Second, MaxBytes: 64 << 10},
		Now:  func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer auth.Close()                                      // stops the background refresh
	fmt.Println("ready:", auth.Ready(context.Background())) // optional: fetch now, fail fast

	mint := func(kid string) *http.Request {
		t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
			"iss": "https://login.example.com/", "sub": "alice", "aud": "reports-api",
			"client_id": "cli", "exp": now.Add(time.Hour).Unix(),
		})
		t.Header["kid"], t.Header["typ"] = kid, "at+jwt"
		s, _ := t.SignedString(priv)
		r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
		r.Header.Set("Authorization", "Bearer "+s)
		return r
	}
	p, err := auth.Authenticate(mint("2026-05"))
	fmt.Printf("%+v %v\n", p, err)

	// An unknown kid triggers at most one refresh per issuer per cooldown,
	// then is refused.
	_, err = auth.Authenticate(mint("rotated-away"))
	fmt.Println(err)
	// Output:
	// ready: <nil>
	// {Issuer:https://login.example.com/ Tenant:acme Plan: Account:alice CredentialID:cli Method:jwt} <nil>
	// identity: invalid_token: unknown key id
}

func ExampleNewAPIKey() {
	pepper := []byte("example-pepper-of-at-least-32-bytes!") // a secret kept apart from the records
	key, rec, err := identity.NewAPIKey(pepper, "acme", "ci-bot")
	if err != nil {
		fmt.Println(err)
		return
	}
	// key is shown to its owner once; only rec is stored.
	fmt.Println(len(key), key[:3], key[3:15] == rec.ID)

	store, _ := identity.NewMemoryAPIKeyStore([]identity.APIKeyRecord{rec})
	auth, _ := identity.NewAPIKeyAuthenticator(identity.APIKeyConfig{Store: store, Pepper: pepper})

	r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	r.Header.Set("X-API-Key", key) // or "Authorization: Bearer rk_..."
	p, err := auth.Authenticate(r)
	fmt.Println(p.Tenant, p.Account, p.Method, p.CredentialID == rec.ID, err)

	// A typo is caught by the checksum, without a store lookup.
	c := byte('a')
	if key[20] == 'a' {
		c = 'b'
	}
	typo := key[:20] + string(c) + key[21:]
	r.Header.Set("X-API-Key", typo)
	_, err = auth.Authenticate(r)
	fmt.Println(err)
	// Output:
	// 54 rk_ true
	// acme ci-bot api_key true <nil>
	// identity: invalid_token: API key is malformed
}

func ExampleCombinedAuthenticator() {
	pepper := []byte("example-pepper-of-at-least-32-bytes!")
	key, rec, _ := identity.NewAPIKey(pepper, "acme", "ci-bot")
	store, _ := identity.NewMemoryAPIKeyStore([]identity.APIKeyRecord{rec})
	keys, _ := identity.NewAPIKeyAuthenticator(identity.APIKeyConfig{Store: store, Pepper: pepper})
	// Sources default to the Authorization header (and X-API-Key);
	// SourceQuery and SourceCookie are opt-in and risky.
	auth, err := identity.NewCombinedAuthenticator(identity.CombinedConfig{APIKeys: keys})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := httptest.NewRequest("GET", "/v1/reports/1?access_token="+key, nil)
	_, err = auth.Authenticate(r)
	fmt.Println(errors.Is(err, identity.ErrNoCredential)) // the query string is not read

	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("X-API-Key", key)
	_, err = auth.Authenticate(r)
	var ae *identity.AuthError
	fmt.Println(errors.As(err, &ae), ae.Status(), ae.Description)
	// Output:
	// true
	// true 400 credentials presented in more than one place
}
