package middleware

import (
	"net/http/httptest"
	"testing"
)

// TestDescribedRequestQuery: the described request carries the query its
// path gives (a cost function may read it), never the debug request's own.
func TestDescribedRequestQuery(t *testing.T) {
	for _, tc := range []struct {
		target, path, query string
	}{
		{"/debug/ratekey?method=POST&path=%2Fv1%2Fbatch%3Fitems%3D4", "/v1/batch", "items=4"},
		{"/debug/ratekey?method=POST&path=%2Fv1%2Fbatch", "/v1/batch", ""},
		{"/debug/ratekey?method=POST", "/debug/ratekey", "method=POST"}, // no path: the live request
	} {
		r, ok := describedRequest(httptest.NewRequest("GET", tc.target, nil))
		if !ok || r.URL.Path != tc.path || r.URL.RawQuery != tc.query {
			t.Errorf("%s: %v %q ?%q; want %q ?%q", tc.target, ok, r.URL.Path, r.URL.RawQuery, tc.path, tc.query)
		}
	}
}
