package middleware_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/net/html"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limiter/redis"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// pageTables returns the tables of the page's section whose <h2> text is
// heading (those between it and the next <h2>): each as its cells' text,
// row by row.
func pageTables(t *testing.T, page, heading string) [][][]string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("the page does not parse: %v", err)
	}
	var h2 *html.Node
	for n := range doc.Descendants() {
		if n.Type == html.ElementNode && n.Data == "h2" && text(n) == heading {
			h2 = n
			break
		}
	}
	if h2 == nil {
		t.Fatalf("the page has no <h2>%s</h2>:\n%s", heading, page)
	}
	var tables [][][]string
	for n := h2.NextSibling; n != nil && !(n.Type == html.ElementNode && n.Data == "h2"); n = n.NextSibling {
		if n.Type != html.ElementNode || n.Data != "table" {
			continue
		}
		var rows [][]string
		for tr := range n.Descendants() {
			if tr.Type != html.ElementNode || tr.Data != "tr" {
				continue
			}
			var row []string
			for c := tr.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && (c.Data == "th" || c.Data == "td") {
					row = append(row, text(c))
				}
			}
			rows = append(rows, row)
		}
		tables = append(tables, rows)
	}
	return tables
}

// text returns n's text content, its runs of white space made one space
// and trimmed.
func text(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// pageFields returns a two-column table of the page (<th>name</th><td>value</td>
// per row) as a map.
func pageFields(t *testing.T, page, heading string) map[string]string {
	t.Helper()
	tables := pageTables(t, page, heading)
	if len(tables) != 1 {
		t.Fatalf("%s: %d tables; want 1", heading, len(tables))
	}
	m := map[string]string{}
	for _, row := range tables[0] {
		if len(row) != 2 {
			t.Fatalf("%s: row %q is not a name and a value", heading, row)
		}
		m[row[0]] = row[1]
	}
	return m
}

// pagePolicies returns the page's policy tables, merged: for each policy
// (named by the first cell of its rows), its cells by column heading. Each
// table has a heading row and one row per policy, in the same order.
func pagePolicies(t *testing.T, page string) map[string]map[string]string {
	t.Helper()
	tables := pageTables(t, page, "4. Policies")
	if len(tables) == 0 {
		t.Fatalf("the page has no policy table")
	}
	out := map[string]map[string]string{}
	for _, rows := range tables {
		if len(rows) != len(tables[0]) || len(rows) < 2 {
			t.Fatalf("policy table %q: %d rows; want a heading and a row per policy (%d)", rows, len(rows), len(tables[0])-1)
		}
		for i, row := range rows[1:] {
			if len(row) != len(rows[0]) || row[0] != tables[0][i+1][0] {
				t.Fatalf("policy row %q: %d cells under %q, or not policy %q", row, len(row), rows[0], tables[0][i+1][0])
			}
			if out[row[0]] == nil {
				out[row[0]] = map[string]string{}
			}
			for j, c := range row {
				if _, dup := out[row[0]][rows[0][j]]; dup && j > 0 {
					t.Fatalf("policy %s: two %q columns", row[0], rows[0][j])
				}
				out[row[0]][rows[0][j]] = c
			}
		}
	}
	return out
}

// checkCells reports each cell of got that differs from want.
func checkCells(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: no %q column", what, k)
		} else if g != v {
			t.Errorf("%s: %s %q; want %q", what, k, g, v)
		}
	}
}

// pageColumns maps each field of a policy's debug JSON to the page column
// showing it, but dry_run (the policy's name says "(dry run)") and
// skipped_reason, error and fail_mode (the note).
var pageColumns = map[string]string{"name": "policy", "key": "key", "decision": "decision", "cost": "cost",
	"rate": "rate", "burst": "burst", "remaining": "remaining", "retry_after_seconds": "retry after",
	"store": "store", "delay_after": "delay after", "delay_seconds": "delay", "override": "override",
	"max_in_flight": "max in flight", "in_flight": "in flight", "cached": "cached", "slot": "slot", "fallback": "fallback", "prefetched": "prefetched",
	"reserved": "reserved", "settled": "settled",
	"adaptive_limit": "adaptive limit", "class": "class"}

// checkPageMatchesJSON checks that the page shows what the debug JSON
// body of the same request says: each policy field in its column (null as
// —, seconds with " s"), and round_trips. A JSON field the page has no
// column for fails it.
func checkPageMatchesJSON(t *testing.T, page string, body []byte) {
	t.Helper()
	var rec struct {
		Policies   []map[string]any `json:"policies"`
		RoundTrips json.Number      `json:"round_trips"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		t.Fatalf("debug JSON: %v\n%s", err, body)
	}
	pols := pagePolicies(t, page)
	if len(pols) != len(rec.Policies) {
		t.Errorf("the page shows %d policies, the JSON %d", len(pols), len(rec.Policies))
	}
	for _, p := range rec.Policies {
		name, _ := p["name"].(string)
		if p["dry_run"] == true {
			name += " (dry run)"
		}
		row := pols[name]
		for field, v := range p {
			switch field {
			case "dry_run", "skipped_reason", "error", "fail_mode":
				continue
			}
			col, ok := pageColumns[field]
			if !ok {
				t.Errorf("the page has no column for the JSON's %q", field)
				continue
			}
			want := "—"
			switch v := v.(type) {
			case string:
				want = v
			case bool:
				want = strconv.FormatBool(v)
			case json.Number:
				want = v.String()
				if strings.HasSuffix(field, "_seconds") {
					want += " s"
				}
			}
			if field == "name" {
				want = name
			}
			if row[col] != want {
				t.Errorf("policy %s: the page's %s %q; the JSON's %s is %v", name, col, row[col], field, v)
			}
		}
	}
	if got := pageFields(t, page, "3. Operation")["round trips"]; got != rec.RoundTrips.String() {
		t.Errorf("the page's round trips %q; the JSON's round_trips %s", got, rec.RoundTrips)
	}
}

// capPolicy is an in-flight cap of 2 per network.
func capPolicy() policy.Policy {
	return policy.Policy{Name: "conc", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limiter.Limit{MaxInFlight: 2}}
}

// pageScenario: a token bucket per tenant with an override for tenant
// acme (1/m, burst 6 instead of 3), and an in-flight cap of 2 per
// network, in the memory store.
func pageScenario() []policy.Policy {
	return []policy.Policy{perTenant(policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 6}}), capPolicy()}
}

// holdSlot runs one request from peer through a second rate limiter over
// lim (another replica sharing the store) with only policy p, and returns
// once its handler runs, holding p's slot; release lets it end.
func holdSlot(t *testing.T, lim limiter.Limiter, p policy.Policy, peer string) (release func()) {
	t.Helper()
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Policies: []policy.Policy{p},
		Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	entered, done, finished := make(chan struct{}), make(chan struct{}), make(chan int, 1)
	r.With(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.Handler).
		Get("/hold", func(http.ResponseWriter, *http.Request) { close(entered); <-done })
	go func() {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/hold", nil)
		req.RemoteAddr = peer
		r.ServeHTTP(w, req)
		finished <- w.Code
	}()
	select {
	case <-entered:
	case code := <-finished:
		t.Fatalf("the request meant to hold a slot ended with %d before its handler ran", code)
	}
	return func() {
		close(done)
		if code := <-finished; code != http.StatusOK {
			t.Errorf("the request holding a slot: %d; want 200", code)
		}
	}
}

// wantScenarioRows are the policy rows of pageScenario's page for tenant
// acme, with one request of the client's network holding a cap slot.
func wantScenarioRows(network string) map[string]map[string]string {
	return map[string]map[string]string{
		"per-tenant": {"key": "per-tenant|tenant=acme", "decision": "PASSED", "override": "tenant=acme", "cost": "1",
			"rate": "1/m", "burst": "6", "delay after": "6", "max in flight": "—", "in flight": "—", "remaining": "5",
			"retry after": "—", "delay": "—", "store": "memory", "cached": "false", "slot": "—", "note": ""},
		"conc": {"key": "conc|network=" + network, "decision": "PASSED", "override": "—", "cost": "1",
			"rate": "—", "burst": "—", "delay after": "—", "max in flight": "2", "in flight": "1", "remaining": "0",
			"retry after": "—", "delay": "—", "store": "memory", "cached": "false", "slot": "—", "note": ""},
	}
}

// TestDebugPageShowsEveryField: each field of a policy's debug JSON has a
// column of the HTML page, and the record's round_trips a row, with the
// JSON's value: an override and a token bucket's shape, an in-flight cap's
// max_in_flight and in_flight (one slot held), and for the memory store
// cached false, no slot (—) and 0 round trips.
func TestDebugPageShowsEveryField(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: pageScenario()})
	release := holdSlot(t, s.lim, capPolicy(), "192.0.2.10:7")
	defer release()
	w := s.do(req{path: "/debug/ratekey?method=GET&path=/v1/reports/7", peer: "192.0.2.10:1", token: s.token("alice", "app-1"),
		headers: http.Header{"Accept": {"text/html"}}})
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("%d %q", w.Code, w.Header().Get("Content-Type"))
	}
	page := w.Body.String()
	jw := s.do(req{path: "/debug/ratekey?method=GET&path=/v1/reports/7", peer: "192.0.2.10:1", token: s.token("alice", "app-1")})
	checkPageMatchesJSON(t, page, jw.Body.Bytes())
	pols := pagePolicies(t, page)
	for name, want := range wantScenarioRows("192.0.2.10/32") {
		checkCells(t, name, pols[name], want)
	}
	if len(pols) != 2 {
		t.Errorf("%d policy rows; want 2", len(pols))
	}
	checkCells(t, "operation", pageFields(t, page, "3. Operation"), map[string]string{
		"operation": "GET /v1/reports/{id}", "decision": "PASSED", "round trips": "0"})
}

// TestDebugPageEscapesOverride: an override's name is text on the page,
// whatever it holds (a library OverrideFunc names its answers freely).
func TestDebugPageEscapesOverride(t *testing.T) {
	const name = `<script>alert("x")</script>&amp;`
	p := perTenant()
	p.OverrideFunc = func(limitkey.Key) (policy.Override, bool) {
		return policy.Override{Tenant: name, Limit: limiter.Limit{Burst: 4}}, true
	}
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{p}})
	w := s.do(req{path: "/debug/ratekey?path=/v1/reports/7", peer: "192.0.2.10:1", token: s.token("alice", "app-1"),
		headers: http.Header{"Accept": {"text/html"}}})
	page := w.Body.String()
	if w.Code != http.StatusOK || strings.Contains(page, "<script") {
		t.Fatalf("%d; the override's name reached the page unescaped:\n%s", w.Code, page)
	}
	checkCells(t, "per-tenant", pagePolicies(t, page)["per-tenant"], map[string]string{"override": "tenant=" + name, "burst": "4"})
}

// TestDebugPageRedisCluster: on a Redis Cluster the page shows the slot
// that decided (the slot Redis itself computes for the bucket's key), the
// round trips (1 for a call to Redis, 0 for the deny cache's answer), and
// cached true once the deny cache answers.
func TestDebugPageRedisCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	lim, err := redis.New(client, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Policies: []policy.Policy{perNetwork("1/m", 1)},
		Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	res := proxyResolver(t)
	r.Handle("/debug/ratekey", mustDebug(t, middleware.DebugConfig{Resolver: res, RateLimiter: rl, Allow: []string{"192.0.2.0/24"}}))
	r.With(middleware.ClientAddress(res, middleware.ClientAddressOptions{}), rl.Handler).Get("/v1/reports/{id}", func(http.ResponseWriter, *http.Request) {})
	do := func(path string, accept string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = "192.0.2.10:1"
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	page := func() string {
		t.Helper()
		w := do("/debug/ratekey?path=/v1/reports/1", "text/html")
		if w.Code != http.StatusOK {
			t.Fatalf("debug: %d %s", w.Code, w.Body)
		}
		checkPageMatchesJSON(t, w.Body.String(), do("/debug/ratekey?path=/v1/reports/1", "").Body.Bytes())
		return w.Body.String()
	}

	first := page() // before any request: Redis has no key yet
	if w := do("/v1/reports/1", ""); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	key, err := srv.Do("KEYS", "*")
	if err != nil || key == "" || strings.Contains(key, "\n") {
		t.Fatalf("KEYS *: %q, %v; want the bucket's one key", key, err)
	}
	slot, err := srv.Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatal(err)
	}
	if w := do("/v1/reports/1", ""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request: %d; want 429 (Redis rejects it, and the deny cache learns the bucket)", w.Code)
	}
	cachedPage := page()

	for _, tc := range []struct {
		name, page       string
		cells            map[string]string
		roundTrips       string
		decisionOverview string
	}{
		{"before any request", first, map[string]string{"decision": "PASSED", "remaining": "0", "retry after": "—",
			"store": "redis", "cached": "false", "slot": slot}, "1", "PASSED"},
		// No master decided a cached answer: no slot.
		{"answered by the deny cache", cachedPage, map[string]string{"decision": "REJECTED", "remaining": "0",
			"store": "redis", "cached": "true", "slot": "—"}, "0", "REJECTED"},
	} {
		pols := pagePolicies(t, tc.page)
		want := map[string]string{"key": "per-network|network=192.0.2.10/32", "override": "—", "rate": "1/m", "burst": "1",
			"max in flight": "—", "in flight": "—"}
		for k, v := range tc.cells {
			want[k] = v
		}
		checkCells(t, tc.name, pols["per-network"], want)
		checkCells(t, tc.name, pageFields(t, tc.page, "3. Operation"), map[string]string{
			"decision": tc.decisionOverview, "round trips": tc.roundTrips})
	}
}

// TestDebugPageShowsPrincipal: the Credential section shows every field of
// the JSON's principal, the plan included (overrides match it), with the
// JSON's value, and — for an empty plan or credential id.
func TestDebugPageShowsPrincipal(t *testing.T) {
	lim := memory.New(memory.Options{Now: clocktest.NewManualClock().Time})
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{perTenant(policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 9}})}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("/debug/ratekey", mustDebug(t, middleware.DebugConfig{Resolver: proxyResolver(t), Authenticator: fakeAuth{},
		Auth: middleware.AuthOptions{Anonymous: true}, RateLimiter: rl, Allow: []string{"192.0.2.0/24"}}))
	r.Get("/v1/reports/{id}", func(http.ResponseWriter, *http.Request) {})
	get := func(credential, accept string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/debug/ratekey?method=GET&path=/v1/reports/1", nil)
		req.RemoteAddr = "192.0.2.10:1"
		req.Header.Set("Authorization", "Bearer "+credential)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", credential, w.Code, w.Body)
		}
		return w
	}
	for _, c := range []struct {
		credential string
		want       map[string]string
	}{
		{"acme:pro:alice", map[string]string{"outcome": "verified", "issuer": "test", "tenant": "acme", "plan": "pro",
			"account": "alice", "credential id": "—", "method": "jwt"}},
		{"acme::bob", map[string]string{"outcome": "verified", "issuer": "test", "tenant": "acme", "plan": "—",
			"account": "bob", "credential id": "—", "method": "jwt"}},
	} {
		page := get(c.credential, "text/html").Body.String()
		got := pageFields(t, page, "2. Credential")
		checkCells(t, c.credential, got, c.want)
		var rec struct {
			Principal map[string]string `json:"principal"`
		}
		if err := json.Unmarshal(get(c.credential, "").Body.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		for field, v := range rec.Principal {
			row := strings.ReplaceAll(field, "_", " ")
			if v == "" {
				v = "—"
			}
			if got[row] != v {
				t.Errorf("%s: the page's %s %q; the JSON's principal.%s is %q", c.credential, row, got[row], field, v)
			}
		}
	}
}
