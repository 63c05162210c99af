package identity

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/internal/quote"
)

// minRSABits is the smallest RSA modulus accepted anywhere in this package
// (RFC 7518 §3.3 requires 2048 bits or larger for RS*/PS*).
const minRSABits = 2048

// algorithm describes one supported JWS algorithm (RFC 7518 §3.1, RFC 8037).
type algorithm struct {
	method jwt.SigningMethod
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
	"EdDSA": {method: jwt.SigningMethodEdDSA, family: familyEdDSA},
	"ES256": {method: jwt.SigningMethodES256, family: familyECDSA, curve: elliptic.P256()},
	"ES384": {method: jwt.SigningMethodES384, family: familyECDSA, curve: elliptic.P384()},
	"ES512": {method: jwt.SigningMethodES512, family: familyECDSA, curve: elliptic.P521()},
	"RS256": {method: jwt.SigningMethodRS256, family: familyRSA},
	"RS384": {method: jwt.SigningMethodRS384, family: familyRSA},
	"RS512": {method: jwt.SigningMethodRS512, family: familyRSA},
	"PS256": {method: jwt.SigningMethodPS256, family: familyRSA},
	"PS384": {method: jwt.SigningMethodPS384, family: familyRSA},
	"PS512": {method: jwt.SigningMethodPS512, family: familyRSA},
	"HS256": {method: jwt.SigningMethodHS256, family: familyHMAC, hmacN: 32},
	"HS384": {method: jwt.SigningMethodHS384, family: familyHMAC, hmacN: 48},
	"HS512": {method: jwt.SigningMethodHS512, family: familyHMAC, hmacN: 64},
}

// SigningMethodFor returns the golang-jwt signing method for a JWS "alg"
// value (RFC 7518 §3.1): EdDSA, ES256, ES384, ES512, RS256, RS384, RS512,
// PS256, PS384, PS512, HS256, HS384 or HS512, matched exactly
// (case-sensitive, as RFC 7515 §4.1.1 requires). "none" and every other name
// are an error. Safe for concurrent use.
func SigningMethodFor(alg string) (jwt.SigningMethod, error) {
	a, ok := algorithms[alg]
	if !ok {
		return nil, fmt.Errorf("identity: unsupported JWS algorithm %s", quote.Value(alg))
	}
	return a.method, nil
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

// checkPublicKey validates a configured verification key's own properties
// (not its algorithms). It returns a message free of key material.
func checkPublicKey(key any) error {
	switch k := key.(type) {
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("Ed25519 public key is %d bytes, want %d", len(k), ed25519.PublicKeySize)
		}
	case *ecdsa.PublicKey:
		// Nil coordinates make ECDH and Bytes panic, and reading them is
		// the only way to tell.
		//lint:ignore SA1019 checking for nil, not using the coordinates
		if k == nil || k.Curve == nil || k.X == nil || k.Y == nil {
			return errors.New("ECDSA public key is nil or incomplete")
		}
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return errors.New("ECDSA public key is not on P-256, P-384 or P-521")
		}
		if _, err := k.ECDH(); err != nil {
			return errors.New("ECDSA public key is not a valid curve point")
		}
	case *rsa.PublicKey:
		if k == nil || k.N == nil {
			return errors.New("RSA public key is nil")
		}
		if n := k.N.BitLen(); n < minRSABits {
			return fmt.Errorf("RSA key is %d bits, need at least %d", n, minRSABits)
		}
		if k.E < 3 || k.E%2 == 0 {
			return errors.New("RSA public exponent is invalid")
		}
	case []byte:
		if bytes.Contains(k, []byte("-----BEGIN")) {
			return errors.New("HMAC secret looks like a PEM block: parse public keys with ParsePublicKeyPEM instead of using their bytes as a secret")
		}
		// Length is checked per algorithm (RFC 7518 §3.2) by the caller.
	case nil:
		return errors.New("key is nil")
	default:
		return fmt.Errorf("unsupported key type %T (want ed25519.PublicKey, *ecdsa.PublicKey, *rsa.PublicKey or []byte)", key)
	}
	return nil
}

// decodeOnePEM decodes exactly one PEM block; anything but whitespace after
// it is an error, as are encrypted (RFC 1423) blocks.
func decodeOnePEM(data []byte) (*pem.Block, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, errors.New("identity: no PEM block found")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("identity: data after the first PEM block")
	}
	if _, ok := block.Headers["Proc-Type"]; ok {
		return nil, errors.New("identity: encrypted PEM blocks are not supported")
	}
	return block, nil
}

// ParsePublicKeyPEM parses one PEM-encoded public key for use as a
// [VerificationKey].Key:
//
//   - "PUBLIC KEY" (PKIX, RFC 5280 SubjectPublicKeyInfo): RSA, ECDSA
//     (P-256, P-384, P-521) or Ed25519.
//   - "RSA PUBLIC KEY" (PKCS #1).
//
// It returns ed25519.PublicKey, *ecdsa.PublicKey or *rsa.PublicKey. RSA keys
// under 2048 bits, other curves, X25519 keys, certificates, private keys,
// encrypted blocks and trailing data after the block are errors. Safe for
// concurrent use.
func ParsePublicKeyPEM(data []byte) (any, error) {
	block, err := decodeOnePEM(data)
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
	if err := checkPublicKey(key); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return key, nil
}

// ParsePrivateKeyPEM parses one PEM-encoded private key for signing (the
// demo's dev-token minting and tests):
//
//   - "PRIVATE KEY" (PKCS #8): RSA, ECDSA (P-256, P-384, P-521) or Ed25519.
//   - "EC PRIVATE KEY" (SEC 1).
//   - "RSA PRIVATE KEY" (PKCS #1).
//
// The result is an ed25519.PrivateKey, *ecdsa.PrivateKey or *rsa.PrivateKey
// as a crypto.Signer; pass it to jwt.Token.SignedString with the method from
// [SigningMethodFor]. RSA keys under 2048 bits, other curves, encrypted blocks
// and trailing data are errors. Safe for concurrent use.
func ParsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	block, err := decodeOnePEM(data)
	if err != nil {
		return nil, err
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("identity: unsupported PEM block type %s (want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)", quote.Value(block.Type))
	}
	if err != nil {
		return nil, fmt.Errorf("identity: parsing private key: %w", err)
	}
	var signer crypto.Signer
	switch k := key.(type) {
	case ed25519.PrivateKey:
		signer = k
	case *ecdsa.PrivateKey:
		signer = k
	case *rsa.PrivateKey:
		signer = k
	default:
		return nil, fmt.Errorf("identity: unsupported private key type %T", key)
	}
	if err := checkPublicKey(signer.Public()); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return signer, nil
}
