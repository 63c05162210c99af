package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"

	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/trustedproxy"
)

// TestClientFromKeepsTheOutcome: the request keeps how its client was
// chosen (peer, rule, header, reason: trustedproxy.Resolver.Resolve's
// Result) but no hop list; a Record lists the examined hops, in a list of
// its own that the next request's derivation does not touch.
func TestClientFromKeepsTheOutcome(t *testing.T) {
	res, err := trustedproxy.New(trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got trustedproxy.Result
	h := middleware.ClientAddress(res, middleware.ClientAddressOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = middleware.ClientFrom(r.Context())
	}))
	serve := func(xff string, record bool) *middleware.Record {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "10.0.0.1:4000"
		req.Header.Set("X-Forwarded-For", xff)
		var rec *middleware.Record
		if record {
			var ctx context.Context
			ctx, rec = middleware.WithRecord(req.Context())
			req = req.WithContext(ctx)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		return rec
	}
	rec := serve("198.51.100.7, 10.0.0.2", true)
	want := trustedproxy.Result{
		Client:  netip.MustParseAddr("198.51.100.7"),
		Network: netip.MustParsePrefix("198.51.100.7/32"),
		Derivation: trustedproxy.Derivation{Peer: "10.0.0.1", PeerTrusted: true, Rule: 0, Header: "X-Forwarded-For",
			Chosen: -1, Reason: "first_untrusted_hop"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClientFrom = %+v\nwant %+v", got, want)
	}
	serve("203.0.113.9, 10.0.0.3", false)
	wantHops := []trustedproxy.Hop{
		{Position: 1, Value: "10.0.0.2", Address: "10.0.0.2", Verdict: "trusted"},
		{Position: 0, Value: "198.51.100.7", Address: "198.51.100.7", Verdict: "client"},
	}
	if !reflect.DeepEqual(rec.Derivation.Hops, wantHops) || rec.Derivation.Chosen != 1 {
		t.Errorf("the Record's hops = %+v (chosen %d)\nwant %+v (chosen 1)", rec.Derivation.Hops, rec.Derivation.Chosen, wantHops)
	}
}
