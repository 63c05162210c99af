package identity

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"fmt"

	"github.com/ratekey/ratekey/internal/jwkey"
	"github.com/ratekey/ratekey/internal/quote"
)

// algorithm describes one supported JWS algorithm (RFC 7518 §3.1, RFC 8037).
type algorithm struct {
	family keyFamily
	curve  elliptic.Curve // for ES*: the only curve the algorithm accepts
	hmacN  int            // for HS*: minimum secret length in bytes (RFC 7518 §3.2)
}

// keyFamily classifies verification keys.
type keyFamily int

const (
	familyNone keyFamily = iota
	familyEdDSA
	familyECDSA
	familyRSA
	familyHMAC
)

// algorithms is the closed set of supported algorithms. "none" is absent
// on purpose and can never be configured or accepted.
var algorithms = map[string]algorithm{
	"EdDSA": {family: familyEdDSA},
	"ES256": {family: familyECDSA, curve: elliptic.P256()},
	"ES384": {family: familyECDSA, curve: elliptic.P384()},
	"ES512": {family: familyECDSA, curve: elliptic.P521()},
	"RS256": {family: familyRSA},
	"RS384": {family: familyRSA},
	"RS512": {family: familyRSA},
	"PS256": {family: familyRSA},
	"PS384": {family: familyRSA},
	"PS512": {family: familyRSA},
	"HS256": {family: familyHMAC, hmacN: 32},
	"HS384": {family: familyHMAC, hmacN: 48},
	"HS512": {family: familyHMAC, hmacN: 64},
}

// familyOf classifies a verification key; familyNone for unsupported types.
func familyOf(key any) keyFamily {
	switch key.(type) {
	case ed25519.PublicKey:
		return familyEdDSA
	case *ecdsa.PublicKey:
		return familyECDSA
	case *rsa.PublicKey:
		return familyRSA
	case []byte:
		return familyHMAC
	}
	return familyNone
}

// compatible reports whether alg may be verified with key: same key family,
// and for ES* the curve the algorithm names. This is what makes RS256→HS256
// confusion impossible: an HS* token is only ever checked against a []byte
// secret configured as such, never against public-key material.
func compatible(alg string, key any) bool {
	a, ok := algorithms[alg]
	if !ok || a.family != familyOf(key) {
		return false
	}
	if a.family == familyECDSA {
		k := key.(*ecdsa.PublicKey)
		return k != nil && k.Curve == a.curve
	}
	return true
}

// ParsePublicKeyPEM parses one PEM-encoded public key for use as a
// [VerificationKey].Key:
//
//   - "PUBLIC KEY" (PKIX, RFC 5280 SubjectPublicKeyInfo): RSA, ECDSA
//     (P-256, P-384, P-521) or Ed25519.
//   - "RSA PUBLIC KEY" (PKCS #1).
//
// It returns ed25519.PublicKey, *ecdsa.PublicKey or *rsa.PublicKey. RSA keys
// under 2048 or over 8192 bits (a larger modulus makes each verification,
// even of a forged token, cost milliseconds: crypto/tls's limit,
// CVE-2023-29409), other curves, X25519 keys, certificates, private keys,
// encrypted blocks and trailing data after the block are errors. Safe for
// concurrent use.
func ParsePublicKeyPEM(data []byte) (any, error) {
	block, err := jwkey.DecodeOnePEM(data)
	if err != nil {
		return nil, err
	}
	var key any
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	default:
		return nil, fmt.Errorf("identity: unsupported PEM block type %s (want PUBLIC KEY or RSA PUBLIC KEY)", quote.Value(block.Type))
	}
	if err != nil {
		return nil, fmt.Errorf("identity: parsing public key: %w", err)
	}
	if familyOf(key) == familyNone || familyOf(key) == familyHMAC {
		return nil, fmt.Errorf("identity: unsupported public key type %T", key)
	}
	if err := jwkey.CheckPublicKey(key); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return key, nil
}
