package identity

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/limitkey"
)

// jwtCase is one Verify outcome: either want (success) or desc (failure
// description; the code is always invalid_token from Verify).
type jwtCase struct {
	name  string
	token func(tb testing.TB, k *testKeys) string
	want  limitkey.Principal
	desc  string
	is    error // optional: errors.Is target
}

func jwtCases() []jwtCase {
	edA := func(claims obj) func(testing.TB, *testKeys) string {
		return func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, claims)
		}
	}
	rsB := func(claims obj) func(testing.TB, *testKeys) string {
		return func(tb testing.TB, k *testKeys) string {
			return mint(tb, "RS256", k.rsa, obj{"kid": "b-rsa"}, claims)
		}
	}
	raw := func(hdr, payload string) func(testing.TB, *testKeys) string {
		return func(tb testing.TB, k *testKeys) string {
			return signRaw(tb, jwt.SigningMethodEdDSA, k.ed, hdr, payload)
		}
	}
	a := baseClaims(issA)
	b := baseClaims(issB).with("tenant", "t2")
	validPayloadA := a.json()
	past := testNow.Add(-time.Hour).Unix()
	future := testNow.Add(time.Hour).Unix()

	return []jwtCase{
		// Successes, one per algorithm family.
		{name: "EdDSA valid, client_id", token: edA(a.with("client_id", "cli-1", "azp", "ignored")),
			want: limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", CredentialID: "cli-1", Method: limitkey.MethodJWT}},
		{name: "ES256 valid, azp fallback", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "ES256", k.es, obj{"kid": "a-es"}, a.with("azp", "spa-7", "sub", "bob"))
		}, want: limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "bob", CredentialID: "spa-7", Method: limitkey.MethodJWT}},
		{name: "RS256 valid, tenant claim, aud array", token: rsB(b.with("aud", []string{"other", "api2"})),
			want: limitkey.Principal{Issuer: issB, Tenant: "t2", Account: "alice", Method: limitkey.MethodJWT}},
		{name: "HS256 valid, single key, no kid", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "HS256", k.hmac, nil, baseClaims(issH).with("sub", "svc|1"))
		}, want: limitkey.Principal{Issuer: issH, Tenant: "hmac", Account: "svc|1", Method: limitkey.MethodJWT}},
		{name: "single-key record, token with its kid", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issC))
		}, want: limitkey.Principal{Issuer: issC, Tenant: "tc", Account: "alice", Method: limitkey.MethodJWT}},
		{name: "expired within leeway", token: edA(a.with("exp", testNow.Add(-10*time.Second).Unix())),
			want: limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", Method: limitkey.MethodJWT}},
		{name: "fractional exp", token: edA(a.with("exp", float64(future)+0.5)),
			want: limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", Method: limitkey.MethodJWT}},
		{name: "no iat", token: edA(a.with("iat", nil)),
			want: limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", Method: limitkey.MethodJWT}},
		{name: "unrelated case-variant claim ignored", token: edA(a.with("Role", "x", "role", "y")),
			want: limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", Method: limitkey.MethodJWT}},

		// Algorithm.
		{name: "alg none", token: func(tb testing.TB, k *testKeys) string {
			return signRaw(tb, nil, nil, `{"alg":"none","kid":"a-ed"}`, validPayloadA)
		}, desc: "algorithm not allowed", is: errAlgNotAllowed},
		{name: "alg None", token: func(tb testing.TB, k *testKeys) string {
			return signRaw(tb, nil, nil, `{"alg":"None"}`, validPayloadA)
		}, desc: "algorithm not allowed"},
		{name: "RS256->HS256 confusion with public key PEM as secret", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "HS256", pkixPEM(tb, &k.rsa.PublicKey), obj{"kid": "b-rsa"}, b)
		}, desc: "algorithm not allowed", is: errAlgNotAllowed},
		{name: "alg listed by record but key of other family", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "ES256", k.es, obj{"kid": "a-ed"}, a)
		}, desc: "token algorithm does not match its key", is: errKeyAlg},
		{name: "alg not listed for record", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "ES384", k.es384, obj{"kid": "a-es"}, a)
		}, desc: "algorithm not allowed"},
		{name: "alg missing", token: raw(`{"kid":"a-ed"}`, validPayloadA), desc: "token is malformed"},
		{name: "alg not a string", token: raw(`{"alg":1}`, validPayloadA), desc: "token is malformed"},

		// Signature.
		{name: "bad signature", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.edOther, obj{"kid": "a-ed"}, a)
		}, desc: "token signature is invalid", is: jwt.ErrTokenSignatureInvalid},
		{name: "forged and expired reports signature", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.edOther, obj{"kid": "a-ed"}, a.with("exp", past))
		}, desc: "token signature is invalid", is: jwt.ErrTokenSignatureInvalid},
		{name: "forged with every claim wrong reports signature", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.edOther, obj{"kid": "a-ed"},
				a.with("exp", 0, "aud", "x", "sub", nil, "nbf", future*2, "Sub", "y"))
		}, desc: "token signature is invalid"},
		{name: "tampered signature", token: func(tb testing.TB, k *testKeys) string {
			t := mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a)
			i := strings.LastIndexByte(t, '.') + 1
			c := byte('A')
			if t[i] == 'A' {
				c = 'B'
			}
			return t[:i] + string(c) + t[i+1:]
		}, desc: "token signature is invalid"},
		{name: "signature cut to a shorter valid length", token: func(tb testing.TB, k *testKeys) string {
			t := mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a)
			return t[:len(t)-6]
		}, desc: "token signature is invalid"},
		{name: "signature with nonzero trailing bits", token: func(tb testing.TB, k *testKeys) string {
			// 64 bytes take 86 base64url characters; the last one carries 2
			// data bits and 4 padding bits, which strict decoding wants zero.
			t := mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a)
			const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
			last := strings.IndexByte(alphabet, t[len(t)-1])
			return t[:len(t)-1] + string(alphabet[last|1])
		}, desc: "token is malformed"},
		{name: "payload swapped under a valid signature", token: func(tb testing.TB, k *testKeys) string {
			t1 := mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a)
			t2 := mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a.with("sub", "root"))
			p1 := strings.Split(t1, ".")
			p2 := strings.Split(t2, ".")
			return p1[0] + "." + p2[1] + "." + p1[2]
		}, desc: "token signature is invalid"},
		{name: "cross-issuer: C's key, iss D, same kid", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.edC, obj{"kid": "k1"}, baseClaims(issD))
		}, desc: "token signature is invalid", is: jwt.ErrTokenSignatureInvalid},
		{name: "cross-issuer: A's key and kid, iss C", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issC))
		}, desc: "unknown key id", is: errUnknownKID},
		{name: "cross-issuer: A's key and kid, iss B", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, b)
		}, desc: "algorithm not allowed"},

		// Key selection.
		{name: "unknown kid", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.ed, obj{"kid": "nope"}, a)
		}, desc: "unknown key id", is: errUnknownKID},
		{name: "no kid, record has two keys", token: edAnoKID(a), desc: "token has no key id and the issuer has several keys", is: errKIDRequired},
		{name: "kid not a string", token: raw(`{"alg":"EdDSA","kid":7}`, validPayloadA), desc: "token is malformed"},
		{name: "kid on single unnamed key", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "HS256", k.hmac, obj{"kid": "x"}, baseClaims(issH))
		}, desc: "unknown key id"},

		// Header parameters.
		{name: "crit header", token: edAHdr(obj{"crit": []string{"exp"}, "exp": 1}, a),
			desc: "token has a critical header parameter that is not understood", is: errCrit},
		{name: "crit header empty list", token: edAHdr(obj{"crit": []string{}}, a),
			desc: "token has a critical header parameter that is not understood"},
		{name: "jku header", token: edAHdr(obj{"jku": "https://evil.example/jwks"}, a),
			desc: "token header parameter is not allowed", is: errUntrustedHeader},
		{name: "x5u header", token: edAHdr(obj{"x5u": "https://evil.example/cert"}, a), desc: "token header parameter is not allowed"},
		{name: "jwk header", token: edAHdr(obj{"jwk": obj{"kty": "OKP"}}, a), desc: "token header parameter is not allowed"},
		{name: "x5c header", token: edAHdr(obj{"x5c": []string{"MIIB"}}, a), desc: "token header parameter is not allowed"},
		{name: "duplicate header key", token: raw(`{"alg":"EdDSA","kid":"a-ed","kid":"a-es"}`, validPayloadA), desc: "token is malformed"},

		// Issuer.
		{name: "unknown issuer", token: edA(a.with("iss", "https://evil.example/")), desc: "token issuer is not accepted", is: errUnknownIssuer},
		{name: "issuer differs in case", token: edA(a.with("iss", strings.ToUpper(issA))), desc: "token issuer is not accepted"},
		{name: "no issuer", token: edA(a.with("iss", nil)), desc: "token issuer is not accepted"},
		{name: "issuer not a string", token: edA(a.with("iss", []string{issA})), desc: "token issuer is not accepted"},

		// Time.
		{name: "expired", token: edA(a.with("exp", past)), desc: "token is expired", is: jwt.ErrTokenExpired},
		{name: "exp missing", token: edA(a.with("exp", nil)), desc: "token has no expiration time", is: errMissingExp},
		{name: "exp zero", token: edA(a.with("exp", 0)), desc: "token expiration time is invalid", is: errBadExp},
		{name: "exp negative", token: edA(a.with("exp", -5)), desc: "token claims are malformed"},
		{name: "exp quoted number", token: edA(a.with("exp", "4102444800")), desc: "token claims are malformed", is: errClaimsMalformed},
		{name: "exp beyond year 9999", token: edA(a.with("exp", 1e300)), desc: "token claims are malformed"},
		{name: "nbf in future", token: edA(a.with("nbf", testNow.Add(time.Minute).Unix())), desc: "token is not valid yet", is: jwt.ErrTokenNotValidYet},
		{name: "iat in future", token: edA(a.with("iat", testNow.Add(time.Minute).Unix())), desc: "token is issued in the future", is: jwt.ErrTokenUsedBeforeIssued},

		// Audience.
		{name: "wrong audience", token: edA(a.with("aud", "other")), desc: "token audience is not accepted", is: jwt.ErrTokenInvalidAudience},
		{name: "audience of another record", token: edA(a.with("aud", "api2")), desc: "token audience is not accepted"},
		{name: "audience missing", token: edA(a.with("aud", nil)), desc: "token audience is missing", is: errMissingAud},
		{name: "audience empty list", token: edA(a.with("aud", []string{})), desc: "token audience is missing"},
		{name: "audience list with non-string", token: edA(a.with("aud", []any{"api", 1})), desc: "token claims are malformed"},

		// Subject and claim decoding.
		{name: "sub missing", token: edA(a.with("sub", nil)), desc: "token subject is missing", is: errMissingSub},
		{name: "sub empty", token: edA(a.with("sub", "")), desc: "token subject is missing"},
		{name: "sub not a string", token: edA(a.with("sub", 42)), desc: "token claims are malformed"},
		{name: "case-variant Sub alongside sub", token: edA(a.with("Sub", "mallory")), desc: "token claims are malformed"},
		{name: "case-variant only (SUB)", token: edA(a.with("sub", nil, "SUB", "alice")), desc: "token claims are malformed"},
		{name: "unicode fold variant (long s)", token: edA(a.with("\u017fub", "mallory")), desc: "token claims are malformed"},
		{name: "duplicate sub", token: raw(`{"alg":"EdDSA","kid":"a-ed"}`,
			strings.Replace(validPayloadA, `"sub":"alice"`, `"sub":"alice","sub":"mallory"`, 1)), desc: "token is malformed"},
		{name: "sub with lone surrogate", token: raw(`{"alg":"EdDSA","kid":"a-ed"}`,
			strings.Replace(validPayloadA, `"sub":"alice"`, `"sub":"a\ud800"`, 1)), desc: "token claims are malformed"},
		{name: "client_id not a string", token: edA(a.with("client_id", 5)), desc: "token claims are malformed"},
		{name: "payload null", token: raw(`{"alg":"EdDSA","kid":"a-ed"}`, `null`), desc: "token is malformed"},
		{name: "payload array", token: raw(`{"alg":"EdDSA","kid":"a-ed"}`, `[1]`), desc: "token is malformed"},
		{name: "payload trailing data", token: raw(`{"alg":"EdDSA","kid":"a-ed"}`, validPayloadA+`{}`), desc: "token is malformed"},

		// Tenant.
		{name: "tenant not in list", token: rsB(b.with("tenant", "t3")), desc: "token tenant is not accepted", is: errTenant},
		{name: "tenant differs in case", token: rsB(b.with("tenant", "T1")), desc: "token tenant is not accepted"},
		{name: "tenant missing", token: rsB(b.with("tenant", nil)), desc: "token tenant is not accepted"},
		{name: "tenant not a string", token: rsB(b.with("tenant", []string{"t1"})), desc: "token tenant is not accepted"},
		{name: "tenant case-variant TENANT", token: rsB(b.with("tenant", nil, "TENANT", "t1")), desc: "token claims are malformed"},

		// Shape.
		{name: "too long", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a.with("pad", strings.Repeat("x", maxTokenBytes)))
		}, desc: "token is too long", is: errTokenTooLong},
		{name: "empty", token: func(testing.TB, *testKeys) string { return "" }, desc: "token is malformed"},
		{name: "two segments", token: func(tb testing.TB, k *testKeys) string {
			t := mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a)
			return t[:strings.LastIndexByte(t, '.')]
		}, desc: "token is malformed", is: jwt.ErrTokenMalformed},
		{name: "four segments", token: func(tb testing.TB, k *testKeys) string {
			return mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a) + ".x"
		}, desc: "token is malformed"},
		{name: "padded header segment", token: func(tb testing.TB, k *testKeys) string {
			t := mint(tb, "EdDSA", k.ed, obj{"kid": "a-ed"}, a)
			h, rest, _ := strings.Cut(t, ".")
			return h + "==." + rest
		}, desc: "token is malformed"},
		{name: "standard base64 alphabet", token: func(tb testing.TB, k *testKeys) string {
			return "eyJ+/.eyJ.sig"
		}, desc: "token is malformed"},
	}
}

func edAnoKID(claims obj) func(testing.TB, *testKeys) string {
	return func(tb testing.TB, k *testKeys) string {
		return mint(tb, "EdDSA", k.ed, nil, claims)
	}
}

func edAHdr(hdr obj, claims obj) func(testing.TB, *testKeys) string {
	return func(tb testing.TB, k *testKeys) string {
		return mint(tb, "EdDSA", k.ed, hdr.with("kid", "a-ed"), claims)
	}
}

func TestVerify(t *testing.T) {
	a, k := newTestAuthenticator(t)
	for _, tt := range jwtCases() {
		t.Run(tt.name, func(t *testing.T) {
			tok := tt.token(t, k)
			got, err := a.verifyToken(context.Background(), tok)
			if tt.desc == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if got != tt.want {
					t.Fatalf("Verify = %+v, want %+v", got, tt.want)
				}
				return
			}
			var ae *AuthError
			if !errors.As(err, &ae) {
				t.Fatalf("Verify err = %v (principal %+v), want *AuthError %q", err, got, tt.desc)
			}
			if ae.Code != codeInvalidToken || ae.Status() != http.StatusUnauthorized {
				t.Errorf("code = %q status %d, want invalid_token 401", ae.Code, ae.Status())
			}
			if ae.Description != tt.desc {
				t.Errorf("description = %q, want %q", ae.Description, tt.desc)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(err, %v) = false; err.Err = %v", tt.is, ae.Err)
			}
			if got != (limitkey.Principal{}) {
				t.Errorf("failed Verify returned non-zero principal %+v", got)
			}
		})
	}
}

// TestAuthErrorNeverLeaksToken scans every failure's error text (Error(),
// Description and each wrapped error) for the token and its segments.
func TestAuthErrorNeverLeaksToken(t *testing.T) {
	a, k := newTestAuthenticator(t)
	checked := 0
	for _, tt := range jwtCases() {
		if tt.desc == "" {
			continue
		}
		tok := tt.token(t, k)
		_, err := a.verifyToken(context.Background(), tok)
		if err == nil {
			t.Fatalf("%s: expected failure", tt.name)
		}
		var texts []string
		for e := err; e != nil; e = errors.Unwrap(e) {
			texts = append(texts, e.Error())
		}
		var ae *AuthError
		if errors.As(err, &ae) {
			texts = append(texts, ae.Description)
		}
		needles := []string{tok}
		for _, seg := range strings.Split(tok, ".") {
			if len(seg) >= 8 {
				needles = append(needles, seg, seg[len(seg)-8:])
			}
		}
		for _, text := range texts {
			for _, n := range needles {
				if n != "" && strings.Contains(text, n) {
					t.Errorf("%s: error text %q contains token material %q", tt.name, text, n)
				}
			}
		}
		checked++
	}
	// Header-level failures too.
	for _, v := range [][]string{{"Bearer a.b.c", "Bearer d.e.f"}, {"Basic dXNlcjpwYXNz"}, {"Bearer " + strings.Repeat("A", maxTokenBytes+1)}, {"Bearer abc def"}} {
		_, err := a.Authenticate(headerRequest(http.Header{"Authorization": v}))
		if err == nil {
			t.Errorf("Authorization %.40q accepted; want an error whose text is checked", v)
		}
		for e := err; e != nil; e = errors.Unwrap(e) {
			for _, line := range v {
				_, cred, _ := strings.Cut(line, " ")
				if strings.Contains(e.Error(), cred) {
					t.Errorf("error %q contains credential", e.Error())
				}
			}
		}
		checked++
	}
	if checked < 50 {
		t.Fatalf("only %d failures checked", checked)
	}
}

func TestAuthenticate(t *testing.T) {
	a, k := newTestAuthenticator(t)
	valid := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))
	alice := limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", Method: limitkey.MethodJWT}
	tests := []struct {
		name   string
		lines  []string // nil: no header
		want   limitkey.Principal
		err    error  // ErrNoCredential
		code   string // AuthError code
		status int
	}{
		{name: "valid", lines: []string{"Bearer " + valid}, want: alice},
		{name: "lowercase scheme", lines: []string{"bearer " + valid}, want: alice},
		{name: "uppercase scheme", lines: []string{"BEARER " + valid}, want: alice},
		{name: "no header", err: ErrNoCredential},
		{name: "two lines", lines: []string{"Bearer " + valid, "Bearer " + valid}, code: codeInvalidRequest, status: 400},
		{name: "basic", lines: []string{"Basic x"}, err: ErrUnsupportedScheme},
		{name: "empty header", lines: []string{""}, code: codeInvalidRequest, status: 400},
		{name: "bad token", lines: []string{"Bearer x.y.z"}, code: codeInvalidToken, status: 401},
		{name: "too long", lines: []string{"Bearer " + strings.Repeat("A", maxTokenBytes+1)}, code: codeInvalidToken, status: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tt.lines {
				h.Add("Authorization", l)
			}
			got, err := a.Authenticate(headerRequest(h))
			switch {
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
			case tt.code != "":
				var ae *AuthError
				if !errors.As(err, &ae) || ae.Code != tt.code || ae.Status() != tt.status {
					t.Fatalf("err = %v, want %s %d", err, tt.code, tt.status)
				}
				if errors.Is(err, ErrNoCredential) {
					t.Fatal("an invalid credential must never look like no credential")
				}
			default:
				if err != nil || got != tt.want {
					t.Fatalf("Authenticate = %+v, %v; want %+v", got, err, tt.want)
				}
			}
		})
	}
}

// TestVerifyConcurrent exercises one authenticator from many goroutines
// (run with -race).
func TestVerifyConcurrent(t *testing.T) {
	a, k := newTestAuthenticator(t)
	good := mint(t, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA))
	bad := mint(t, "EdDSA", k.edOther, obj{"kid": "a-ed"}, baseClaims(issA))
	done := make(chan error, 16)
	for i := 0; i < 16; i++ {
		go func() {
			for j := 0; j < 20; j++ {
				if _, err := a.verifyToken(context.Background(), good); err != nil {
					done <- err
					return
				}
				if _, err := a.verifyToken(context.Background(), bad); err == nil {
					done <- errors.New("forged token accepted")
					return
				}
			}
			done <- nil
		}()
	}
	for i := 0; i < 16; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigIsCopied checks that mutating the config after construction
// does not change the authenticator.
func TestConfigIsCopied(t *testing.T) {
	k := getKeys(t)
	cfg := testConfig(k)
	secret := cfg.Issuers[2].Keys[0].Key.([]byte)
	a, err := NewJWTAuthenticator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok := mint(t, "HS256", k.hmac, nil, baseClaims(issH))
	cfg.Issuers[0].Audiences[0] = "changed"
	cfg.Issuers[2].Algorithms[0] = "HS512"
	saved := append([]byte(nil), secret...)
	secret[0] ^= 0xff
	defer copy(secret, saved)
	if _, err := a.verifyToken(context.Background(), tok); err != nil {
		t.Fatalf("Verify after config mutation: %v", err)
	}
	if _, err := a.verifyToken(context.Background(), mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))); err != nil {
		t.Fatalf("Verify after audience mutation: %v", err)
	}
}

func BenchmarkVerifyES256(b *testing.B) {
	a, k := newTestAuthenticator(b)
	tok := mint(b, "ES256", k.es, obj{"kid": "a-es"}, baseClaims(issA).with("client_id", "cli-1"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.verifyToken(context.Background(), tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyEdDSA(b *testing.B) {
	a, k := newTestAuthenticator(b)
	tok := mint(b, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.verifyToken(context.Background(), tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyRejectUnknownIssuer is the cost of a flood of tokens naming
// an unknown issuer (no signature work).
func BenchmarkVerifyRejectUnknownIssuer(b *testing.B) {
	a, k := newTestAuthenticator(b)
	tok := mint(b, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims("https://evil.example/"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.verifyToken(context.Background(), tok); err == nil {
			b.Fatal("accepted")
		}
	}
}
