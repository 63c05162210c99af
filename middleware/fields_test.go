package middleware_test

import (
	"maps"
	"net/http"
	"strconv"
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// parsedItem is one list member of RateLimit-Policy or RateLimit: its name
// and integer parameters.
type parsedItem struct {
	name   string
	params map[string]int64
}

// parseList parses a field as an RFC 9651 List of sf-strings with integer
// parameters, failing the test on anything else.
func parseList(t *testing.T, field string, values []string) []parsedItem {
	t.Helper()
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%s %q is not an RFC 9651 list: %v", field, values, err)
	}
	var out []parsedItem
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %v is not an item", field, m)
		}
		name, ok := item.Value.(string)
		if !ok {
			t.Fatalf("%s: member %v is not a string", field, item.Value)
		}
		p := parsedItem{name: name, params: map[string]int64{}}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("%s: %s;%s=%v is not an integer", field, name, k, v)
			}
			p.params[k] = n
		}
		out = append(out, p)
	}
	return out
}

// TestRateLimitFieldsParse: RateLimit-Policy and RateLimit re-parse with a
// structured-field parser: quoted names, integer parameters, several
// policies in one field in configuration order; Retry-After on a rejection
// is at most the violated policy's t, and both are rounded up.
func TestRateLimitFieldsParse(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{
		perNetwork("2/s", 3),
		{Name: "global.v1_all", Key: []limitkey.Dimension{}, Limit: limit("10/m", 4)},
	}})
	peer := "198.51.100.7:1"
	type want struct {
		code           int
		r0, t0, r1, t1 int64
		retryAfter     string
	}
	steps := []want{
		{200, 2, 1, 3, 6, ""},
		{200, 1, 1, 2, 12, ""},
		{200, 0, 2, 1, 18, ""},
		{429, 0, 2, 1, 18, "1"}, // per-network empty: 0.5 s to a token, rounded up
	}
	for i, w := range steps {
		resp := s.do(req{path: "/v1/reports/1", peer: peer})
		if resp.Code != w.code {
			t.Fatalf("request %d: %d; want %d", i+1, resp.Code, w.code)
		}
		pol := parseList(t, "RateLimit-Policy", resp.Header().Values("RateLimit-Policy"))
		cur := parseList(t, "RateLimit", resp.Header().Values("RateLimit"))
		wantPol := []parsedItem{{"per-network", map[string]int64{"q": 3, "w": 2}}, {"global.v1_all", map[string]int64{"q": 4, "w": 24}}}
		wantCur := []parsedItem{{"per-network", map[string]int64{"r": w.r0, "t": w.t0}}, {"global.v1_all", map[string]int64{"r": w.r1, "t": w.t1}}}
		for j := range wantPol {
			if len(pol) != 2 || len(cur) != 2 || pol[j].name != wantPol[j].name || cur[j].name != wantCur[j].name ||
				!maps.Equal(pol[j].params, wantPol[j].params) || !maps.Equal(cur[j].params, wantCur[j].params) {
				t.Fatalf("request %d: RateLimit-Policy %v, RateLimit %v; want %v, %v", i+1, pol, cur, wantPol, wantCur)
			}
		}
		if got := resp.Header().Get("Retry-After"); got != w.retryAfter {
			t.Errorf("request %d: Retry-After %q; want %q", i+1, got, w.retryAfter)
		}
		if w.code == http.StatusTooManyRequests {
			ra, _ := strconv.ParseInt(resp.Header().Get("Retry-After"), 10, 64)
			if ra > cur[0].params["t"] || ra < 1 {
				t.Errorf("Retry-After %d is not within 1..t=%d of the violated policy", ra, cur[0].params["t"])
			}
		}
	}
}
