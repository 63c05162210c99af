package redact

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"https://keys.example.com/jwks.json", "https://keys.example.com/jwks.json"},
		{"https://user:hunter2@keys.example.com/jwks.json", "https://keys.example.com/jwks.json"},
		{"https://keys.example.com/jwks.json?api_key=SECRET", "https://keys.example.com/jwks.json?…"},
		{"https://keys.example.com/jwks.json?", "https://keys.example.com/jwks.json?…"},
		{"https://u:p@keys.example.com/r?k=SECRET#frag", "https://keys.example.com/r?…"},
		{"http://[::1]:8080/ranges.txt", "http://[::1]:8080/ranges.txt"},
		{"http://%zz/SECRET", "(unparsable URL)"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := URL(tt.raw); got != tt.want {
			t.Errorf("URL(%q) = %q; want %q", tt.raw, got, tt.want)
		}
	}
}

// TestErrorFromClientDo: the error of a real failed request names the URL
// without its query, wrapped or not; other errors pass unchanged.
func TestErrorFromClientDo(t *testing.T) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://127.0.0.1:1/jwks.json?api_key=SECRET", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = http.DefaultClient.Do(req)
	if err == nil || !strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("Client.Do error %v; want one that quotes the URL, for this test to mean anything", err)
	}
	wrapped := fmt.Errorf("fetch: %w", Error(err))
	got := wrapped.Error()
	if strings.Contains(got, "SECRET") || !strings.Contains(got, `"http://127.0.0.1:1/jwks.json?…"`) {
		t.Errorf("redacted error %q", got)
	}
	var ue *url.Error
	if !errors.As(wrapped, &ue) {
		t.Error("the chain lost its *url.Error")
	}
	plain := errors.New("status 500")
	if Error(plain) != plain || Error(nil) != nil {
		t.Error("errors without a URL must pass unchanged")
	}
}

// TestErrorWithholdsAQuotedLocation: a redirect whose Location header does
// not parse fails with a cause that quotes the header; its text is
// withheld, its chain kept.
func TestErrorWithholdsAQuotedLocation(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "http://a b/"+r.URL.Query().Get("loc"))
		w.WriteHeader(http.StatusFound)
	}))
	defer srv.Close()
	for _, loc := range []string{"?key=SECRET", "#access_token=SECRET", "x@SECRET"} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/ranges?loc="+url.QueryEscape(loc), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = srv.Client().Do(req)
		if err == nil || !strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("Location %q: Client.Do error %v; want one that quotes the Location, for this test to mean anything", loc, err)
		}
		cause := errors.Unwrap(err)
		err = Error(err)
		if strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "/ranges?…") {
			t.Errorf("Location %q: redacted error %q", loc, err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("Location %q: the chain lost the cause", loc)
		}
	}
}
