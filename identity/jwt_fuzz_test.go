package identity

import (
	"context"
	"errors"
	"testing"

	"github.com/ratekey/ratekey/limitkey"
)

// FuzzVerify checks that Verify never panics on arbitrary input, that every
// failure is an invalid_token AuthError with a fixed description, and that
// a mutated token is accepted only as the principal of a signed seed.
func FuzzVerify(f *testing.F) {
	a, k := newTestAuthenticator(f)
	seeds := []string{
		mint(f, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("client_id", "c")),
		mint(f, "RS256", k.rsa, obj{"kid": "b-rsa"}, baseClaims(issB).with("tenant", "t1")),
		mint(f, "HS256", k.hmac, nil, baseClaims(issH)),
	}
	// Without a signing key the fuzzer can only be accepted by replaying a
	// seed's signed content, so any success must be a seed's principal.
	known := map[limitkey.Principal]bool{}
	for _, s := range seeds {
		p, err := a.verifyToken(context.Background(), s)
		if err != nil {
			f.Fatal(err)
		}
		known[p] = true
		f.Add(s)
	}
	descs := map[string]bool{"token is too long": true, "token is invalid": true,
		"algorithm not allowed": true, "token issuer is not accepted": true,
		"token has a critical header parameter that is not understood": true,
		"token header parameter is not allowed":                        true,
		"token tenant is not accepted":                                 true,
	}
	for _, c := range classes {
		descs[c.desc] = true
	}
	f.Add(signRaw(f, nil, nil, `{"alg":"none"}`, baseClaims(issA).json()))
	f.Add("")
	f.Add("..")
	f.Add("e30.e30.")
	f.Fuzz(func(t *testing.T, tok string) {
		p, err := a.verifyToken(context.Background(), tok)
		if err == nil {
			if !known[p] {
				t.Fatalf("accepted %q as unknown principal %+v", tok, p)
			}
			return
		}
		var ae *AuthError
		if !errors.As(err, &ae) || ae.Code != codeInvalidToken {
			t.Fatalf("err = %v, want invalid_token AuthError", err)
		}
		if !descs[ae.Description] {
			t.Fatalf("unexpected description %q", ae.Description)
		}
	})
}
