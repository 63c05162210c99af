package identity

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/ratekey/ratekey/limitkey"
)

func newCombined(tb testing.TB, cfg CombinedConfig) *CombinedAuthenticator {
	tb.Helper()
	c, err := NewCombinedAuthenticator(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestCombinedSources pins where credentials are read from and the
// two-places rule (RFC 6750 §2: one method per request).
func TestCombinedSources(t *testing.T) {
	jwtA, k := newTestAuthenticator(t)
	keys, key, rec, _ := newAPIKeyFixture(t)
	tok := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA))
	jwtP := limitkey.Principal{Issuer: issA, Tenant: "acme", Account: "alice", Method: limitkey.MethodJWT}
	keyP := limitkey.Principal{Issuer: defaultAPIKeyIssuer, Tenant: "acme", Account: "alice", CredentialID: rec.ID, Method: limitkey.MethodAPIKey}

	headerOnly := newCombined(t, CombinedConfig{JWT: jwtA, APIKeys: keys})
	all := newCombined(t, CombinedConfig{JWT: jwtA, APIKeys: keys, Sources: []Source{SourceHeader, SourceQuery, SourceCookie}, CookieName: "rk_session"})
	jwtOnly := newCombined(t, CombinedConfig{JWT: jwtA})
	keysOnly := newCombined(t, CombinedConfig{APIKeys: keys, Sources: []Source{SourceQuery}, QueryParameter: "api_key"})

	type req struct {
		target string
		h      http.Header
	}
	tests := []struct {
		name   string
		a      *CombinedAuthenticator
		r      req
		want   limitkey.Principal
		err    error // ErrNoCredential / ErrUnsupportedScheme
		status int   // AuthError status
		desc   string
	}{
		{name: "JWT in header", a: headerOnly, r: req{"/", http.Header{"Authorization": {"Bearer " + tok}}}, want: jwtP},
		{name: "API key in Authorization", a: headerOnly, r: req{"/", http.Header{"Authorization": {"BEARER " + key}}}, want: keyP},
		{name: "API key in X-API-Key", a: headerOnly, r: req{"/", http.Header{"X-Api-Key": {key}}}, want: keyP},
		{name: "nothing", a: headerOnly, r: req{"/", nil}, err: ErrNoCredential},
		{name: "query ignored by default", a: headerOnly, r: req{"/?access_token=" + tok, nil}, err: ErrNoCredential},
		{name: "cookie ignored by default", a: headerOnly, r: req{"/", http.Header{"Cookie": {"rk_session=" + tok}}}, err: ErrNoCredential},
		{name: "JWT and API key", a: headerOnly, r: req{"/", http.Header{"Authorization": {"Bearer " + tok}, "X-Api-Key": {key}}}, status: 400, desc: "credentials presented in more than one place"},
		{name: "invalid JWT and valid API key", a: headerOnly, r: req{"/", http.Header{"Authorization": {"Bearer x.y.z"}, "X-Api-Key": {key}}}, status: 400, desc: "credentials presented in more than one place"},
		{name: "two Authorization lines", a: headerOnly, r: req{"/", http.Header{"Authorization": {"Bearer " + tok, "Bearer " + tok}}}, status: 400},
		{name: "Basic", a: headerOnly, r: req{"/", http.Header{"Authorization": {"Basic YTpi"}}}, err: ErrUnsupportedScheme},
		{name: "query token", a: all, r: req{"/?access_token=" + tok, nil}, want: jwtP},
		{name: "query API key", a: all, r: req{"/?access_token=" + key, nil}, want: keyP},
		{name: "cookie token", a: all, r: req{"/", http.Header{"Cookie": {"other=1; rk_session=" + tok}}}, want: jwtP},
		{name: "header and query", a: all, r: req{"/?access_token=" + tok, http.Header{"Authorization": {"Bearer " + tok}}}, status: 400, desc: "credentials presented in more than one place"},
		{name: "query and cookie", a: all, r: req{"/?access_token=" + tok, http.Header{"Cookie": {"rk_session=" + tok}}}, status: 400},
		{name: "two query parameters", a: all, r: req{"/?access_token=" + tok + "&access_token=" + tok, nil}, status: 400, desc: "a credential field appears more than once"},
		{name: "two cookies", a: all, r: req{"/", http.Header{"Cookie": {"rk_session=" + tok, "rk_session=" + tok}}}, status: 400},
		{name: "empty query parameter", a: all, r: req{"/?access_token=", nil}, status: 400, desc: "credential is empty"},
		{name: "query with bad characters", a: all, r: req{"/?access_token=a%20b", nil}, status: 400, desc: "credential contains invalid characters"},
		// What url.ParseQuery and Request.Cookies drop silently is a
		// malformed credential here, never "no credential".
		{name: "query with a bad escape", a: all, r: req{"/?access_token=" + tok + "%zz", nil}, status: 400, desc: "credential contains invalid characters"},
		{name: "query with a semicolon", a: all, r: req{"/?access_token=" + tok + ";x=1", nil}, status: 400, desc: "credential contains invalid characters"},
		{name: "query credential after a semicolon", a: all, r: req{"/?x=1;access_token=" + tok, nil}, status: 400, desc: "credential contains invalid characters"},
		{name: "query credential after a bare name and a semicolon", a: all, r: req{"/?x;access_token=" + tok, nil}, status: 400, desc: "credential contains invalid characters"},
		{name: "query name escaped", a: all, r: req{"/?x=1&access%5Ftoken=" + tok, nil}, want: jwtP},
		{name: "cookie with DEL", a: all, r: req{"/", http.Header{"Cookie": {"rk_session=" + tok + "\x7f"}}}, status: 400, desc: "credential contains invalid characters"},
		{name: "cookie with an open quote", a: all, r: req{"/", http.Header{"Cookie": {`rk_session="` + tok}}}, status: 400, desc: "credential contains invalid characters"},
		{name: "cookie with a backslash", a: all, r: req{"/", http.Header{"Cookie": {"rk_session=" + tok + `\`}}}, status: 400, desc: "credential contains invalid characters"},
		{name: "cookie with non-ASCII", a: all, r: req{"/", http.Header{"Cookie": {"rk_session=" + tok + "é"}}}, status: 400, desc: "credential contains invalid characters"},
		{name: "malformed cookie beside a good one", a: all, r: req{"/", http.Header{"Cookie": {"rk_session=" + tok + "; rk_session=" + tok + "\x7f"}}}, status: 400, desc: "a credential field appears more than once"},
		{name: "cookie quoted", a: all, r: req{"/", http.Header{"Cookie": {`other=1;  rk_session="` + tok + `"`}}}, want: jwtP},
		{name: "cookie name alone", a: all, r: req{"/", http.Header{"Cookie": {"rk_session"}}}, status: 400, desc: "credential is empty"},
		{name: "malformed other cookie", a: all, r: req{"/", http.Header{"Cookie": {"other=\x7f; rk_session=" + tok}}}, want: jwtP},
		{name: "huge query token", a: all, r: req{"/?access_token=" + strings.Repeat("A", maxTokenBytes+1), nil}, status: 401, desc: "token is too long"},
		{name: "API key refused when not configured", a: jwtOnly, r: req{"/", http.Header{"Authorization": {"Bearer " + key}}}, status: 401, desc: "API keys are not accepted"},
		{name: "X-API-Key unread when not configured", a: jwtOnly, r: req{"/", http.Header{"X-Api-Key": {key}}}, err: ErrNoCredential},
		{name: "JWT refused when not configured", a: keysOnly, r: req{"/?api_key=" + tok, nil}, status: 401, desc: "bearer tokens are not accepted"},
		{name: "custom query parameter", a: keysOnly, r: req{"/?api_key=" + key, nil}, want: keyP},
		{name: "query-only ignores headers", a: keysOnly, r: req{"/", http.Header{"X-Api-Key": {key}}}, err: ErrNoCredential},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.r.target, nil)
			for k, v := range tt.r.h {
				r.Header[k] = v
			}
			p, err := tt.a.Authenticate(r)
			switch {
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
			case tt.status != 0:
				var ae *AuthError
				if !errors.As(err, &ae) || ae.Status() != tt.status || (tt.desc != "" && ae.Description != tt.desc) {
					t.Fatalf("err = %v, want %d %q", err, tt.status, tt.desc)
				}
			default:
				if err != nil || p != tt.want {
					t.Fatalf("= %+v, %v; want %+v", p, err, tt.want)
				}
			}
		})
	}
	// Authenticate (headers only) never sees the query string.
	if _, err := all.Authenticate(headerRequest(http.Header{})); !errors.Is(err, ErrNoCredential) {
		t.Fatal(err)
	}
}

func TestCombinedConfig(t *testing.T) {
	jwtA, _ := newTestAuthenticator(t)
	for _, tc := range []struct {
		cfg  CombinedConfig
		want string // the whole error text
	}{
		{CombinedConfig{}, "jwt, api_keys: neither a JWT nor an API key authenticator"},
		{CombinedConfig{JWT: jwtA, Sources: []Source{"form"}}, `sources[0]: unknown source "form" (want header, query or cookie)`},
		{CombinedConfig{JWT: jwtA, Sources: []Source{SourceHeader, "Header"}}, `sources[1]: unknown source "Header" (want header, query or cookie)`}, // case-sensitive
		{CombinedConfig{JWT: jwtA, Sources: []Source{SourceHeader, SourceHeader}}, `sources[1]: "header" listed twice`},
		{CombinedConfig{JWT: jwtA, Sources: []Source{SourceCookie}, CookieName: "a b"}, `cookie_name: "a b" is not a token`},
		{CombinedConfig{JWT: jwtA, Sources: []Source{SourceQuery}, QueryParameter: "a=b"}, `query_parameter: "a=b" is not a token`},
	} {
		if _, err := NewCombinedAuthenticator(tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: err = %v, want %q", tc.cfg.Sources, err, tc.want)
		}
	}
	for _, s := range []string{"header", "query", "cookie"} {
		if _, err := NewCombinedAuthenticator(CombinedConfig{JWT: jwtA, Sources: []Source{Source(s)}}); err != nil {
			t.Errorf("source %q: %v", s, err)
		}
	}
	c := newCombined(t, CombinedConfig{JWT: jwtA, Sources: []Source{SourceCookie}})
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Cookie", "access_token=x.y.z")
	if _, err := c.Authenticate(r); !isDesc(err, "token is malformed") {
		t.Errorf("default cookie name: %v", err)
	}
}

// extractDescriptions are the descriptions of the errors extract returns:
// fixed text, never a piece of the request.
var extractDescriptions = []string{
	"a credential field appears more than once",
	"credential is empty",
	"token is too long",
	"credential contains invalid characters",
	"credentials presented in more than one place",
	"bearer token contains invalid characters",
	"multiple Authorization header lines",
	"authorization scheme is malformed",
	"bearer token is missing",
}

// FuzzExtractCredential fuzzes the header parser of the combined
// authenticator (Authorization, X-API-Key, Cookie): it never panics, an
// extracted credential is a b64token of at most maxTokenBytes found
// verbatim in the input, and errors are the documented ones with texts that
// never echo the input.
func FuzzExtractCredential(f *testing.F) {
	x := extractor{header: true, apiKeyHeader: true, cookie: true, cookieName: "sid"}
	f.Add("Bearer abc.def.ghi", "", "")
	f.Add("bearer rk_000000000000_00000000000000000000000000000000000000", "", "")
	f.Add("", "rk_x", "")
	f.Add("Bearer a", "b", "")
	f.Add("Basic YTpi", "rk_x", "")
	f.Add("", "", "sid=abc; sid=def")
	f.Add("Bearer  a==", "", "sid=")
	f.Add("\x00", "\xff", "sid=\"quoted\"")
	f.Fuzz(func(t *testing.T, auth, apiKey, cookie string) {
		h := http.Header{}
		for _, kv := range []struct{ k, v string }{{"Authorization", auth}, {"X-Api-Key", apiKey}, {"Cookie", cookie}} {
			for _, line := range strings.Split(kv.v, "\n") {
				if line != "" || kv.v != "" {
					h.Add(kv.k, line)
				}
			}
		}
		c, err := x.extract(h, nil)
		if err == nil {
			if !isB64Token(c.value) || len(c.value) > maxTokenBytes {
				t.Fatalf("extracted a value outside b64token")
			}
			if !strings.Contains(auth+apiKey+cookie, c.value) {
				t.Fatalf("extracted value not in the input")
			}
			return
		}
		if errors.Is(err, ErrNoCredential) || errors.Is(err, ErrUnsupportedScheme) {
			return
		}
		var ae *AuthError
		if !errors.As(err, &ae) || (ae.Code != codeInvalidRequest && ae.Code != codeInvalidToken) {
			t.Fatalf("unexpected error %v", err)
		}
		// The description is fixed text, so it echoes no input. (Checking
		// that no input is a substring of it refused "bearer", which
		// "bearer token is missing" holds as a word of its own.)
		if !slices.Contains(extractDescriptions, ae.Description) {
			t.Fatalf("description %q is none of the fixed ones", ae.Description)
		}
	})
}

// FuzzQueryValues fuzzes the query-string reader of the query source: it
// returns, in order, every value url.ParseQuery decodes for the parameter,
// and any other value it returns (a pair ParseQuery drops) is not a
// b64token, so the credential checks refuse it rather than the request
// passing without a credential.
func FuzzQueryValues(f *testing.F) {
	for _, s := range []string{"access_token=abc", "a=1&access_token=x%zz", "access_token=abc;x=1", "x=1;access_token=abc", "access%5Ftoken=a+b", "access_token", "&&access_token=&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := queryValues(raw, defaultQueryParameter)
		parsed, _ := url.ParseQuery(raw) // the pairs it can decode
		want := parsed[defaultQueryParameter]
		i := 0
		for _, v := range got {
			if i < len(want) && v == want[i] {
				i++
				continue
			}
			if isB64Token(v) {
				t.Fatalf("queryValues(%q) = %q: %q is a b64token that url.ParseQuery does not decode", raw, got, v)
			}
		}
		if i != len(want) {
			t.Fatalf("queryValues(%q) = %q, missing values of %q", raw, got, want)
		}
		// A ";"-separated part naming the parameter (what a server that
		// splits on ";" reads) is never lost.
		for pair := range strings.SplitSeq(raw, "&") {
			for part := range strings.SplitSeq(pair, ";") {
				k, _, _ := strings.Cut(part, "=")
				if key, err := url.QueryUnescape(k); err == nil && key == defaultQueryParameter && strings.Contains(pair, ";") && !slices.Contains(got, pair) {
					t.Fatalf("queryValues(%q) = %q, lost the pair %q", raw, got, pair)
				}
			}
		}
	})
}
