package identity

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

func TestBearerToken(t *testing.T) {
	long := strings.Repeat("A", maxTokenBytes)
	tests := []struct {
		name  string
		lines []string // nil: no header
		want  string
		err   error  // ErrNoCredential or the AuthError's sentinel
		code  string // expected AuthError code
	}{
		{name: "jwt", lines: []string{"Bearer eyJh.eyJz.c2ln"}, want: "eyJh.eyJz.c2ln"},
		{name: "lowercase scheme", lines: []string{"bearer abc"}, want: "abc"},
		{name: "mixed case scheme", lines: []string{"bEaReR abc"}, want: "abc"},
		{name: "several spaces", lines: []string{"Bearer   abc"}, want: "abc"},
		{name: "full b64token charset", lines: []string{"Bearer aZ09-._~+/=="}, want: "aZ09-._~+/=="},
		{name: "exactly maxTokenBytes", lines: []string{"Bearer " + long}, want: long},

		{name: "no header", err: ErrNoCredential},
		{name: "two lines", lines: []string{"Bearer a", "Bearer b"}, err: errMultipleAuthorization, code: codeInvalidRequest},
		{name: "two lines, first empty", lines: []string{"", "Bearer b"}, err: errMultipleAuthorization, code: codeInvalidRequest},
		{name: "empty header", lines: []string{""}, err: errNotBearer, code: codeInvalidRequest},
		{name: "basic", lines: []string{"Basic dXNlcjpwYXNz"}, err: ErrUnsupportedScheme},
		{name: "basic short", lines: []string{"Basic x"}, err: ErrUnsupportedScheme},
		{name: "scheme only", lines: []string{"Bearer"}, err: errEmptyToken, code: codeInvalidRequest},
		{name: "scheme and space", lines: []string{"Bearer "}, err: errEmptyToken, code: codeInvalidRequest},
		{name: "scheme prefix of other scheme", lines: []string{"BearerX abc"}, err: ErrUnsupportedScheme},
		{name: "no separator", lines: []string{"Bearerabc"}, err: ErrUnsupportedScheme},
		{name: "tab separator", lines: []string{"Bearer\tabc"}, err: errNotBearer, code: codeInvalidRequest},
		{name: "leading space", lines: []string{" Bearer abc"}, err: errNotBearer, code: codeInvalidRequest},
		{name: "cyrillic lookalike scheme", lines: []string{"Be\u0430rer abc"}, err: errNotBearer, code: codeInvalidRequest},
		{name: "trailing space", lines: []string{"Bearer abc "}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "two tokens", lines: []string{"Bearer abc def"}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "comma list", lines: []string{"Bearer abc, Bearer def"}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "only padding", lines: []string{"Bearer ==="}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "padding in middle", lines: []string{"Bearer ab=c"}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "quote", lines: []string{`Bearer "abc"`}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "control byte", lines: []string{"Bearer ab\x00c"}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "non-ascii", lines: []string{"Bearer abcé"}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "auth-param form", lines: []string{`Bearer realm="x"`}, err: errTokenCharset, code: codeInvalidRequest},
		{name: "too long", lines: []string{"Bearer " + long + "A"}, err: errTokenTooLong, code: codeInvalidToken},
		{name: "too long with bad bytes is still too long", lines: []string{"Bearer " + long + " x"}, err: errTokenTooLong, code: codeInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tt.lines {
				h.Add("Authorization", l)
			}
			got, err := bearerToken(h)
			if tt.err == nil {
				if err != nil || got != tt.want {
					t.Fatalf("bearerToken = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if got != "" {
				t.Errorf("token %q returned with error", got)
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			var ae *AuthError
			if tt.code == "" {
				if errors.As(err, &ae) {
					t.Fatalf("err = %v is an AuthError, want bare ErrNoCredential", err)
				}
				return
			}
			if !errors.As(err, &ae) || ae.Code != tt.code {
				t.Fatalf("err = %v, want AuthError code %s", err, tt.code)
			}
			want := 400
			if tt.code == codeInvalidToken {
				want = 401
			}
			if ae.Status() != want {
				t.Fatalf("Status() = %d, want %d", ae.Status(), want)
			}
		})
	}
}

// TestBearerTokenCanonicalHeaderKey: net/http canonicalises header names,
// and bearerToken reads through Header.Values, so a lower-case key added
// with Add is found, while a raw non-canonical map key is not a second line.
func TestBearerTokenCanonicalHeaderKey(t *testing.T) {
	h := http.Header{}
	h.Add("authorization", "Bearer abc")
	if got, err := bearerToken(h); err != nil || got != "abc" {
		t.Fatalf("bearerToken = %q, %v", got, err)
	}
}

func TestAuthErrorStatus(t *testing.T) {
	for _, tt := range []struct {
		code string
		want int
	}{{codeInvalidRequest, 400}, {codeInvalidToken, 401}, {"", 401}, {"other", 401}} {
		e := &AuthError{Code: tt.code, Description: "d"}
		if e.Status() != tt.want {
			t.Errorf("Status(%q) = %d, want %d", tt.code, e.Status(), tt.want)
		}
	}
	e := &AuthError{Code: codeInvalidToken, Description: "token is expired", Err: errTokenTooLong}
	if got, want := e.Error(), "identity: invalid_token: token is expired"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, errTokenTooLong) {
		t.Error("Unwrap does not expose Err")
	}
}

// bearerDescriptions is the closed set of descriptions bearerToken uses.
var bearerDescriptions = map[string]bool{
	"multiple Authorization header lines":      true,
	"authorization scheme is malformed":        true,
	"bearer token is missing":                  true,
	"bearer token contains invalid characters": true,
	"token is too long":                        true,
}

// FuzzBearerToken checks that bearerToken never panics, that an accepted
// token is a b64token of at most maxTokenBytes found at the end of a
// "Bearer" + 1*SP header, and that every failure is ErrNoCredential (only
// without header), ErrUnsupportedScheme (only for one line in another
// well-formed scheme) or an AuthError with a fixed description.
func FuzzBearerToken(f *testing.F) {
	f.Add("Bearer abc.def.ghi", "", false)
	f.Add("bearer abc", "", false)
	f.Add("Basic dXNlcjpwYXNz", "", false)
	f.Add("Bearer a", "Bearer b", true)
	f.Add("Bearer  ==", "", false)
	f.Add("", "", false)
	f.Add("Bearer abc=", "x", true)
	f.Fuzz(func(t *testing.T, v1, v2 string, two bool) {
		h := http.Header{"Authorization": {v1}}
		if two {
			h["Authorization"] = append(h["Authorization"], v2)
		}
		tok, err := bearerToken(h)
		if errors.Is(err, ErrUnsupportedScheme) {
			name, _, _ := strings.Cut(v1, " ")
			if two || strings.EqualFold(name, "bearer") || !httpguts.ValidHeaderFieldName(name) {
				t.Fatalf("ErrUnsupportedScheme for %q (two lines: %v)", v1, two)
			}
			return
		}
		if err != nil {
			var ae *AuthError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an AuthError", err)
			}
			if !bearerDescriptions[ae.Description] {
				t.Fatalf("unexpected description %q", ae.Description)
			}
			if ae.Code != codeInvalidRequest && ae.Code != codeInvalidToken {
				t.Fatalf("unexpected code %q", ae.Code)
			}
			if two && ae.Code != codeInvalidRequest {
				t.Fatalf("two lines gave %v", err)
			}
			return
		}
		if two {
			t.Fatal("two Authorization lines accepted")
		}
		if tok == "" || len(tok) > maxTokenBytes || !isB64Token(tok) {
			t.Fatalf("accepted bad token %q", tok)
		}
		prefix, ok := strings.CutSuffix(v1, tok)
		if !ok || len(prefix) < 7 || !strings.EqualFold(prefix[:6], "bearer") || strings.Trim(prefix[6:], " ") != "" {
			t.Fatalf("token %q not extracted from %q as Bearer 1*SP token", tok, v1)
		}
	})
}

// TestB64TokenBytes checks every byte value against RFC 6750 §2.1: ALPHA,
// DIGIT and "-._~+/" anywhere, '=' only as trailing padding.
func TestB64TokenBytes(t *testing.T) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		want := 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("-._~+/", b) >= 0
		if got := isB64Token("a" + string(b) + "a"); got != want {
			t.Errorf("byte 0x%02X inside a token: %v, want %v", c, got, want)
		}
		if got := isB64Token(string(b)); got != want {
			t.Errorf("token of the single byte 0x%02X: %v, want %v", c, got, want)
		}
		if got := isB64Token("a" + string(b) + "=="); got != (want || b == '=') { // "a===" is all padding
			t.Errorf("byte 0x%02X before padding: %v, want %v", c, got, want)
		}
	}
	for _, s := range []string{"", "=", "==", "=a", "a=a"} {
		if isB64Token(s) {
			t.Errorf("%q accepted", s)
		}
	}
	// Every position of tokens long and short (isB64Token reads eight
	// bytes at a time, then the rest one by one).
	const alphabet = "abcXYZ019-._~+/"
	for n := 1; n <= 40; n++ {
		tok := []byte(strings.Repeat(alphabet, 3)[:n])
		if !isB64Token(string(tok)) || !isB64Token(string(tok)+"=") {
			t.Errorf("%q rejected", tok)
		}
		for i := range tok {
			for _, bad := range []byte{' ', '=', ',', 0x00, 0x80, 0xFF, '"'} {
				c := tok[i]
				tok[i] = bad
				if isB64Token(string(tok)) && !(bad == '=' && i == n-1) {
					t.Errorf("%q accepted", tok)
				}
				tok[i] = c
			}
		}
	}
}
