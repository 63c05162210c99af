package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/middleware"
)

// TestRequestContextPrintsNoState: the request state is the request's
// context layer, and handlers and error paths log contexts with %v
// ("request failed: %v", ctx); printing it must name the layer, never show
// the principal, the client address or the keys.
func TestRequestContextPrintsNoState(t *testing.T) {
	res := proxyResolver(t)
	r := chi.NewRouter()
	var printed string
	r.Use(middleware.ClientAddress(res, middleware.ClientAddressOptions{}), middleware.Authenticate(headerAuth{}, middleware.AuthOptions{}))
	r.Get("/x", func(w http.ResponseWriter, r *http.Request) {
		printed = fmt.Sprintf("%v %+v %#v", r.Context(), r.Context(), r.Context())
	})
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.RemoteAddr = "10.0.0.1:1"
	req.Header.Set("X-Forwarded-For", "203.0.113.77")
	req.Header.Set("X-Test-Account", "account-of-alice")
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200 (the handler must run for its print to be checked): %s", rec.Code, rec.Body)
	}
	// Each of the three verbs must have named the layer: the handler ran,
	// under ratekey's request state.
	const layer = ".WithValue(ratekey request state)"
	if n := strings.Count(printed, layer); n != 3 {
		t.Fatalf("the printed context names the ratekey layer %d times, want 3 (%%v, %%+v, %%#v):\n%.400s", n, printed)
	}
	for _, s := range []string{"account-of-alice", "203.0.113.77"} {
		if strings.Contains(printed, s) {
			t.Errorf("fmt %%v of the request context shows %q:\n%.400s", s, printed)
		}
	}
}
