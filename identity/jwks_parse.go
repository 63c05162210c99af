package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/MicahParks/jwkset"

	"github.com/ratekey/ratekey/internal/jwkey"
)

// Errors of a JWK Set document that make the whole set unusable (the last
// good set is kept). Their text names no key material.
var (
	errJWKSMalformed = errors.New("JWK Set is not a JSON object with a \"keys\" array")
	errJWKSTooMany   = errors.New("JWK Set has more keys than allowed")
	errJWKSDupKID    = errors.New("JWK Set has two keys with the same kid")
	errJWKSNoKeys    = errors.New("JWK Set has no key usable by this issuer record")
)

// parseJWKS turns a JWK Set document (RFC 7517 §5) into a snapshot of keys
// bound to one algorithm each, using only the issuer record's algorithms.
//
// The document must be one JSON object with unique members and a "keys"
// array of at most maxKeys objects. Each JWK is converted by
// github.com/MicahParks/jwkset (public parameters only: Private is false, so
// "d" and other private members are never read) after these rules, which
// make a key unusable (present, but never used to verify) rather than
// failing the set:
//   - duplicate members, a non-string kid (an empty kid is no kid, as in a
//     token's header);
//   - "use" other than "sig", "key_ops" without "verify" (RFC 7517 §4.2-4.3);
//   - kty "oct" (a secret has no business in a published set, and an HMAC
//     key next to RSA keys is the algorithm-confusion setup) or any private
//     member ("d", "p", "q", "dp", "dq", "qi", "oth", "k");
//   - x5u, x5c, x5t and x5t#S256 are removed before conversion: no
//     certificate is parsed and no URL fetched (RFC 8725 §3.10);
//   - keys failing [jwkey.CheckPublicKey] (RSA under 2048 or over 8192
//     bits, unsupported curves, X25519);
//   - an "alg" not among the record's algorithms or incompatible with the
//     key; without "alg", a key compatible with none or several of them.
//
// Two entries with the same kid fail the set, as does a set with no usable
// key: none at all, or only keys without kid and more than one of them (a
// key without kid serves the tokens without kid, and only when it is the
// set's one usable key). The last good set is kept then, rather than a set
// that verifies nothing.
func parseJWKS(body []byte, algs []string, maxKeys int) (*keySnapshot, error) {
	top, err := decodeObject(body)
	if err != nil {
		return nil, errJWKSMalformed
	}
	rawKeys, ok := top["keys"]
	if !ok {
		return nil, errJWKSMalformed
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(rawKeys, &entries); err != nil {
		return nil, errJWKSMalformed
	}
	if len(entries) > maxKeys {
		return nil, fmt.Errorf("%w (%d > %d)", errJWKSTooMany, len(entries), maxKeys)
	}
	snap := &keySnapshot{byKID: map[string]boundKey{}, unusable: map[string]struct{}{}}
	seen := map[string]bool{}
	var noKID []boundKey
	for _, raw := range entries {
		kid, hasKID, bk, ok := parseJWK(raw, algs)
		if hasKID {
			if seen[kid] {
				return nil, errJWKSDupKID
			}
			seen[kid] = true
		}
		switch {
		case !ok && hasKID:
			snap.unusable[kid] = struct{}{}
		case !ok:
		case hasKID:
			snap.byKID[kid] = bk
		default:
			noKID = append(noKID, bk)
		}
	}
	if len(snap.byKID) == 0 && len(noKID) != 1 {
		// Keys without kid serve only tokens without kid, and only when
		// one key is usable: among several, such a token cannot choose.
		return nil, errJWKSNoKeys
	}
	if len(snap.byKID)+len(noKID) == 1 { // the one usable key serves tokens without kid too
		for _, bk := range snap.byKID {
			snap.only = &bk
		}
		if len(noKID) == 1 {
			snap.only = &noKID[0]
		}
	}
	return snap, nil
}

// parseJWK converts one JWK. ok reports whether it is usable.
func parseJWK(raw json.RawMessage, algs []string) (kid string, hasKID bool, bk boundKey, ok bool) {
	obj, err := decodeObject(raw)
	if err != nil {
		return "", false, boundKey{}, false
	}
	if v, present := obj["kid"]; present {
		s, isStr := jsonString(v)
		if !isStr {
			return "", false, boundKey{}, false
		}
		// An empty kid names no key, as in a token's header (which then
		// looks for the set's one key): stored under "", the key could
		// never be found.
		kid, hasKID = s, s != ""
	}
	for _, private := range [...]string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"} {
		if _, present := obj[private]; present {
			return kid, hasKID, boundKey{}, false
		}
	}
	key, alg, ok := jwkPublicKey(raw)
	if !ok {
		return kid, hasKID, boundKey{}, false
	}
	bk, ok = bindJWK(key, alg, algs)
	return kid, hasKID, bk, ok
}

// jwkPublicKey decodes the public key of a JWK holding no private member:
// a signature key (use and key_ops allow verification) of type RSA, EC or
// OKP, its X.509 members ignored, that passes jwkey.CheckPublicKey. alg is
// the JWK's alg member ("" when absent).
func jwkPublicKey(raw json.RawMessage) (key any, alg string, ok bool) {
	var m jwkset.JWKMarshal
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", false
	}
	if m.USE != "" && m.USE != jwkset.UseSig {
		return nil, "", false
	}
	if len(m.KEYOPS) > 0 && !slices.Contains(m.KEYOPS, jwkset.KeyOpsVerify) {
		return nil, "", false
	}
	if m.KTY != jwkset.KtyRSA && m.KTY != jwkset.KtyEC && m.KTY != jwkset.KtyOKP {
		return nil, "", false
	}
	m.X5U, m.X5C, m.X5T, m.X5TS256 = "", nil, "", ""
	jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{Private: false}, jwkset.JWKValidateOptions{})
	if err != nil {
		return nil, "", false
	}
	key = jwk.Key()
	if err := jwkey.CheckPublicKey(key); err != nil || familyOf(key) == familyHMAC {
		return nil, "", false
	}
	return key, string(m.ALG), true
}

// bindJWK binds a JWK's key to the one algorithm of algs it is for: its
// alg member (which must be usable with the key), or the only algorithm
// usable with the key.
func bindJWK(key any, alg string, algs []string) (boundKey, bool) {
	var usable []string
	for _, a := range algs {
		if compatible(a, key) {
			usable = append(usable, a)
		}
	}
	switch {
	case alg != "":
		if !slices.Contains(usable, alg) {
			return boundKey{}, false
		}
		return boundKey{key: key, alg: alg}, true
	case len(usable) == 1:
		return boundKey{key: key, alg: usable[0]}, true
	}
	return boundKey{}, false
}
