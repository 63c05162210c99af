package identity_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/ratekey/ratekey/identity"
)

func ExampleKey_String() {
	k := identity.Key{
		Policy: "per-account",
		Parts: []identity.Part{
			{Dimension: identity.DimTenant, Value: "acme"},
			{Dimension: identity.DimAccount, Value: "alice"},
			{Dimension: identity.DimOperation, Value: "GET /v1/reports/{id}"},
		},
	}
	fmt.Println(k)

	// Separators and non-printable bytes inside values are escaped, so
	// ("a|b", "c") and ("a", "b|c") never share an encoding.
	x := identity.Key{Policy: "p", Parts: []identity.Part{
		{Dimension: identity.DimTenant, Value: "a|b"}, {Dimension: identity.DimAccount, Value: "c"}}}
	y := identity.Key{Policy: "p", Parts: []identity.Part{
		{Dimension: identity.DimTenant, Value: "a"}, {Dimension: identity.DimAccount, Value: "b|c"}}}
	fmt.Println(x)
	fmt.Println(y)
	fmt.Println(identity.Key{Policy: "p", Parts: []identity.Part{{Dimension: identity.DimAccount, Value: "José\n"}}})

	back, err := identity.ParseKey(k.String())
	fmt.Println(err, back.Parts[2].Value)
	// Output:
	// per-account|tenant=acme|account=alice|operation=GET /v1/reports/{id}
	// p|tenant=a%7Cb|account=c
	// p|tenant=a|account=b%7Cc
	// p|account=Jos%C3%A9%0A
	// <nil> GET /v1/reports/{id}
}

func ExampleJWTAuthenticator_Verify() {
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

	mint := func(exp time.Time, signer ed25519.PrivateKey) string {
		t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
			"iss":       "https://login.example.com/",
			"sub":       "alice",
			"aud":       "reports-api",
			"client_id": "reports-cli",
			"exp":       exp.Unix(),
		})
		t.Header["kid"] = "2026-01"
		s, _ := t.SignedString(signer)
		return s
	}

	p, err := auth.Verify(mint(now.Add(time.Hour), priv))
	fmt.Printf("%+v %v\n", p, err)

	_, err = auth.Verify(mint(now.Add(-time.Hour), priv))
	fmt.Println(err)

	// A forged token reports the signature failure, whatever its claims.
	forger := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	_, err = auth.Verify(mint(now.Add(-time.Hour), forger))
	var ae *identity.AuthError
	if errors.As(err, &ae) {
		fmt.Println(ae.Status(), ae.Code, ae.Description)
	}
	// Output:
	// {Issuer:https://login.example.com/ Tenant:acme Account:alice CredentialID:reports-cli Method:jwt} <nil>
	// identity: invalid_token: token is expired
	// 401 invalid_token token signature is invalid
}
