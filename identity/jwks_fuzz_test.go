package identity

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/ratekey/ratekey/internal/jwkey"
)

// FuzzParseJWKS: whatever a JWK Set endpoint returns, parseJWKS neither
// panics nor hands out a key the issuer record could not use. A set it
// accepts has a usable key; every usable key is bound to one of the
// record's algorithms and passes jwkey.CheckPublicKey (so no RSA key
// outside 2048-8192 bits, no secret, no private key); a kid is usable or
// unusable, never both; the key for tokens without kid is there exactly
// when one key is usable. A refused set fails with one of the set errors,
// whose text holds no key material.
func FuzzParseJWKS(f *testing.F) {
	k := getKeys(f)
	set := func(keys ...obj) []byte { return must(json.Marshal(obj{"keys": keys})) }
	ed := jwk("ed", "EdDSA", k.ed.Public())
	for _, seed := range [][]byte{
		set(ed),
		set(ed, jwk("rs", "RS256", &k.rsa.PublicKey), jwk("es", "ES256", &k.es.PublicKey)),
		set(jwk("", "EdDSA", k.ed.Public())),
		set(ed, ed),
		set(ed, jwk("enc", "", &k.rsa.PublicKey).with("use", "enc")),
		set(ed, jwk("oct", "HS256", k.hmac)),
		set(ed, jwk("huge", "RS256", rsaModulus(f, 8200))),
		set(ed, jwk("x5u", "EdDSA", k.edOther.Public()).with("x5u", "https://example.invalid/")),
		[]byte(`{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}]}`),
		[]byte(`{"keys":[{"kty":"EC","crv":"P-256","kid":1,"x":"","y":""}]}`),
		[]byte(`{"keys":{}}`),
		[]byte(`{"keys":[],"keys":[]}`),
		[]byte(`[]`),
	} {
		f.Add(seed)
	}
	algs := []string{"EdDSA", "RS256", "ES256"}
	const maxKeys = 8
	f.Fuzz(func(t *testing.T, body []byte) {
		snap, err := parseJWKS(body, algs, maxKeys)
		if err != nil {
			if snap != nil {
				t.Fatalf("a snapshot beside error %v", err)
			}
			if !errors.Is(err, errJWKSMalformed) && !errors.Is(err, errJWKSTooMany) &&
				!errors.Is(err, errJWKSDupKID) && !errors.Is(err, errJWKSNoKeys) {
				t.Fatalf("error %q is none of the set errors", err)
			}
			return
		}
		usable := len(snap.byKID)
		check := func(kid string, bk boundKey) {
			if !slices.Contains(algs, bk.alg) {
				t.Fatalf("kid %q bound to %q, not an algorithm of the record", kid, bk.alg)
			}
			if err := jwkey.CheckPublicKey(bk.key); err != nil {
				t.Fatalf("kid %q: usable key fails CheckPublicKey: %v", kid, err)
			}
			if _, secret := bk.key.([]byte); secret {
				t.Fatalf("kid %q: a secret taken from a published set", kid)
			}
		}
		for kid, bk := range snap.byKID {
			if kid == "" {
				t.Fatal("a key stored under the empty kid, which no token names")
			}
			check(kid, bk)
			if _, both := snap.unusable[kid]; both {
				t.Fatalf("kid %q both usable and unusable", kid)
			}
		}
		if snap.only != nil {
			check("(only)", *snap.only)
		}
		if usable == 0 && snap.only == nil {
			t.Fatal("a set accepted with no usable key")
		}
		if usable > 1 && snap.only != nil {
			t.Fatalf("%d keys with a kid, yet a key for tokens without kid", usable)
		}
	})
}
