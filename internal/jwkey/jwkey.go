// Package jwkey holds the key handling that package identity and the
// demo share: the checks every verification key passes, PEM decoding, and
// the private keys and signing methods the demo's dev tokens are minted
// with. Verification itself lives in identity.
package jwkey

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

// MinRSABits is the smallest RSA modulus accepted anywhere in ratekey
// (RFC 7518 §3.3 requires 2048 bits or larger for RS*/PS*).
const MinRSABits = 2048

// MaxRSABits is the largest RSA modulus accepted anywhere in ratekey.
// Checking a signature costs, whatever the signature, about the square of
// the modulus size times the public exponent's length, and is paid before
// the signature is found forged. A key published with a huge modulus (a
// JWK Set is fetched; an issuer resolver's records may come from tenants)
// would let any client spend that much CPU per forged token: measured on
// a 2-vCPU EPYC, 130 ms at 48 000 bits (about the largest an 8 KiB token's
// signature can match) with the largest exponent Go accepts (2^31-1),
// against 0.1 ms for a 2048-bit key with 65537. 8192 bits is crypto/tls's
// limit for the same reason (Go 1.21, CVE-2023-29409); at that size a
// forged token still costs 1 to 3 ms (as one against a P-521 key costs
// 1.6 ms), which a pre-auth policy per network bounds.
const MaxRSABits = 8192

// signingMethods maps each JWS "alg" value identity supports to its
// golang-jwt method. "none" is absent on purpose.
var signingMethods = map[string]jwt.SigningMethod{
	"EdDSA": jwt.SigningMethodEdDSA,
	"ES256": jwt.SigningMethodES256,
	"ES384": jwt.SigningMethodES384,
	"ES512": jwt.SigningMethodES512,
	"RS256": jwt.SigningMethodRS256,
	"RS384": jwt.SigningMethodRS384,
	"RS512": jwt.SigningMethodRS512,
	"PS256": jwt.SigningMethodPS256,
	"PS384": jwt.SigningMethodPS384,
	"PS512": jwt.SigningMethodPS512,
	"HS256": jwt.SigningMethodHS256,
	"HS384": jwt.SigningMethodHS384,
	"HS512": jwt.SigningMethodHS512,
}

// SigningMethodFor returns the golang-jwt signing method for a JWS "alg"
// value (RFC 7518 §3.1): EdDSA, ES256, ES384, ES512, RS256, RS384, RS512,
// PS256, PS384, PS512, HS256, HS384 or HS512, matched exactly
// (case-sensitive, as RFC 7515 §4.1.1 requires). "none" and every other name
// are an error. Safe for concurrent use.
func SigningMethodFor(alg string) (jwt.SigningMethod, error) {
	m, ok := signingMethods[alg]
	if !ok {
		return nil, fmt.Errorf("identity: unsupported JWS algorithm %s", quote.Value(alg))
	}
	return m, nil
}

// CheckPublicKey validates a configured verification key's own properties
// (not its algorithms). It returns a message free of key material.
func CheckPublicKey(key any) error {
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
		return checkRSA(k)
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

// checkRSA validates an RSA public key: a modulus of MinRSABits to
// MaxRSABits, an odd exponent from 3 to 2^31-1.
func checkRSA(k *rsa.PublicKey) error {
	if k == nil || k.N == nil {
		return errors.New("RSA public key is nil")
	}
	if n := k.N.BitLen(); n < MinRSABits {
		return fmt.Errorf("RSA key is %d bits, need at least %d", n, MinRSABits)
	} else if n > MaxRSABits {
		return fmt.Errorf("RSA key is %d bits, at most %d are accepted (each verification would cost milliseconds)", n, MaxRSABits)
	}
	if k.E < 3 || k.E%2 == 0 {
		return errors.New("RSA public exponent is invalid")
	}
	if k.E > 1<<31-1 {
		// crypto/rsa refuses every signature under such a key.
		return errors.New("RSA public exponent is larger than 2^31-1, which crypto/rsa does not verify with")
	}
	return nil
}

// DecodeOnePEM decodes exactly one PEM block; anything but whitespace after
// it is an error, as are encrypted (RFC 1423) blocks.
func DecodeOnePEM(data []byte) (*pem.Block, error) {
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
	block, err := DecodeOnePEM(data)
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
	if err := CheckPublicKey(signer.Public()); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return signer, nil
}
