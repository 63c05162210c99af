package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/trustedproxy"
)

// TestRequestContextPrintsNoState: since the request state became its own
// context layer (7452fec), r.Context() is a *requestState with no String
// method, so fmt prints it field by field: the verified principal, the
// client address and its derivation (the forwarding entries), and the
// arena's raw bytes (the request's keys). A context.WithValue layer, as
// before, prints its value as "<not Stringer>". Handlers and error paths
// that log a context with %v ("request failed: %v", ctx) now write a
// client's identity into the log.
func TestRequestContextPrintsNoState(t *testing.T) {
	res, err := trustedproxy.New(trustedproxy.Config{Trusted: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	var printed string
	r.Use(middleware.ClientAddress(res), middleware.Authenticate(headerAuth{}, middleware.AuthOptions{}))
	r.Get("/x", func(w http.ResponseWriter, r *http.Request) { printed = fmt.Sprintf("%v", r.Context()) })
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.RemoteAddr = "10.0.0.1:1"
	req.Header.Set("X-Forwarded-For", "203.0.113.77")
	req.Header.Set("X-Test-Account", "account-of-alice")
	r.ServeHTTP(httptest.NewRecorder(), req)
	for _, s := range []string{"account-of-alice", "203.0.113.77"} {
		if strings.Contains(printed, s) {
			t.Errorf("fmt %%v of the request context shows %q:\n%.400s", s, printed)
		}
	}
}
