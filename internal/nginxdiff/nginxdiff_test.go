package nginxdiff

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/internal/servertest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/middleware"
)

// ---------------------------------------------------------------------------
// The policies, once, for both servers.

// zone is an nginx limit_req_zone keyed by one query argument ($arg_<arg>);
// in ratekey it is a policy of that name keyed by the custom dimension
// arg_<arg>. Two locations naming one zone share its state, as two routes
// naming one policy share its buckets.
type zone struct {
	name string
	arg  string // "k" or "g"
	rate int64  // requests per second
}

// limitReq is one limit_req directive of a location.
type limitReq struct {
	zone    zone
	burst   int64 // burst=N; 0 when absent
	nodelay bool
	delay   int64 // delay=D; 0 when absent
}

// location is an nginx location and the chi route that mirrors it.
type location struct {
	path   string
	limits []limitReq
	status int  // limit_req_status; 0 leaves nginx's default, 503
	dryRun bool // limit_req_dry_run on
}

var (
	zBurst   = zone{"burst", "k", 1}
	zNodelay = zone{"nodelay", "k", 1}
	zDelay   = zone{"delay", "k", 1}
	zNoburst = zone{"noburst", "k", 1}
	zDefault = zone{"default", "k", 1}
	zDry     = zone{"dry", "k", 1}
	// The mixed locations: a per-client zone and a per-group zone at a
	// different rate, shared by an enforcing and a dry-run location.
	zMixK = zone{"mixk", "k", 1}
	zMixG = zone{"mixg", "g", 2}

	locBurst   = location{path: "/burst", limits: []limitReq{{zone: zBurst, burst: 2}}, status: 429}
	locNodelay = location{path: "/nodelay", limits: []limitReq{{zone: zNodelay, burst: 2, nodelay: true}}, status: 429}
	locDelay   = location{path: "/delay", limits: []limitReq{{zone: zDelay, burst: 2, delay: 1}}, status: 429}
	locNoburst = location{path: "/noburst", limits: []limitReq{{zone: zNoburst}}, status: 429}
	locDefault = location{path: "/default-status", limits: []limitReq{{zone: zDefault, burst: 2, nodelay: true}}}
	locDry     = location{path: "/dry-run", limits: []limitReq{{zone: zDry, burst: 2}}, status: 429, dryRun: true}
	mixLimits  = []limitReq{{zone: zMixK, burst: 1}, {zone: zMixG, burst: 3, delay: 1}}
	locMixed   = location{path: "/mixed", limits: mixLimits, status: 429}
	locMixDry  = location{path: "/mixed-dry", limits: mixLimits, status: 429, dryRun: true}

	locations = []location{locBurst, locNodelay, locDelay, locNoburst, locDefault, locDry, locMixed, locMixDry}
)

// ratekeyLimit is limiter/doc.go's nginx mapping: burst=N is Burst N+1;
// plain burst=N delays all but the first token (DelayAfter 1); burst=N
// delay=D is DelayAfter D+1; nodelay is DelayAfter 0 (= Burst).
func ratekeyLimit(l limitReq) limiter.Limit {
	lim := limiter.Limit{Rate: limiter.Rate{Count: l.zone.rate, Per: time.Second}, Burst: l.burst + 1}
	switch {
	case l.nodelay:
	case l.delay > 0:
		lim.DelayAfter = l.delay + 1
	default:
		lim.DelayAfter = 1
	}
	return lim
}

// ratekeyConfig is the RateLimitConfig of one location: one policy per
// zone, the location's status (nginx's default 503 when it sets none),
// on_missing skip (nginx skips a zone whose key is empty) and the dry run
// of the whole location.
func ratekeyConfig(loc location, store limiter.Limiter, op func(*http.Request) string, logger *slog.Logger) middleware.RateLimitConfig {
	status := cmp.Or(loc.status, http.StatusServiceUnavailable)
	cfg := middleware.RateLimitConfig{Limiter: store, Operation: op, Logger: logger, DryRun: loc.dryRun, DecisionHeader: true,
		Custom: map[limitkey.Dimension]func(*http.Request) (string, bool){"arg_k": queryArg("k"), "arg_g": queryArg("g")}}
	for _, l := range loc.limits {
		cfg.Policies = append(cfg.Policies, policy.Policy{Name: l.zone.name, Key: []limitkey.Dimension{limitkey.Dimension("arg_" + l.zone.arg)},
			Limit: ratekeyLimit(l), Status: status, OnMissing: policy.OnMissingSkip})
	}
	return cfg
}

// queryArg reads a query argument, as nginx's $arg_<name> does. (A value the
// client writes: fine for a test, never for a production key.)
func queryArg(name string) func(*http.Request) (string, bool) {
	return func(r *http.Request) (string, bool) {
		v := r.URL.Query().Get(name)
		return v, v != ""
	}
}

// nginxConf renders the nginx configuration of every location.
func nginxConf(dir string, port int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 1024; }
http {
  log_format diff '$msec $request_uri $status "$limit_req_status" $request_time';
  access_log %[1]s/access.log diff;
  client_body_temp_path %[1]s/client_body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
`, dir)
	seen := map[string]bool{}
	for _, loc := range locations {
		for _, l := range loc.limits {
			if !seen[l.zone.name] {
				seen[l.zone.name] = true
				fmt.Fprintf(&b, "  limit_req_zone $arg_%s zone=%s:1m rate=%dr/s;\n", l.zone.arg, l.zone.name, l.zone.rate)
			}
		}
	}
	fmt.Fprintf(&b, "  server {\n    listen 127.0.0.1:%d;\n", port)
	b.WriteString("    add_header X-Limit-Req-Status $limit_req_status always;\n")
	for _, loc := range locations {
		fmt.Fprintf(&b, "    location = %s {\n", loc.path)
		for _, l := range loc.limits {
			fmt.Fprintf(&b, "      limit_req zone=%s", l.zone.name)
			if l.burst > 0 {
				fmt.Fprintf(&b, " burst=%d", l.burst)
			}
			if l.nodelay {
				b.WriteString(" nodelay")
			}
			if l.delay > 0 {
				fmt.Fprintf(&b, " delay=%d", l.delay)
			}
			b.WriteString(";\n")
		}
		if loc.status != 0 {
			fmt.Fprintf(&b, "      limit_req_status %d;\n", loc.status)
		}
		if loc.dryRun {
			b.WriteString("      limit_req_dry_run on;\n")
		}
		// A content handler: "return 200" would answer in the rewrite
		// phase, before limit_req (preaccess phase) ever runs.
		b.WriteString("      empty_gif;\n    }\n")
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// ---------------------------------------------------------------------------
// The traces and what nginx's documented arithmetic predicts for them.

// outcome is one response: status, decision ($limit_req_status or
// RateLimit-Decision) and completion delay.
type outcome struct {
	status   int
	decision string
	delay    time.Duration
}

// step is one request of a trace, sent at a fixed offset from the start.
// Steps with the same offset are simultaneous (a group); their order
// within the group is not deterministic, so a group is compared as a
// multiset.
type step struct {
	at   time.Duration
	path string
	k, g string
	want outcome
}

func (s step) query() url.Values {
	q := url.Values{"k": {s.k}}
	if s.g != "" {
		q.Set("g", s.g)
	}
	return q
}

func (s step) target() string { return s.path + "?" + s.query().Encode() }

type scenario struct {
	name  string
	steps []step
	// margin is the arrival jitter, in ms, that no decision outside a
	// simultaneous group may be closer to flipping (TestTracePredictions).
	margin int64
}

const ms = time.Millisecond

var (
	passed = outcome{200, "PASSED", 0}
	rej429 = outcome{429, "REJECTED", 0}
	rej503 = outcome{503, "REJECTED", 0}
	dryDel = outcome{200, "DELAYED_DRY_RUN", 0}
	dryRej = outcome{200, "REJECTED_DRY_RUN", 0}
)

func delayed(d time.Duration) outcome { return outcome{200, "DELAYED", d} }

// simultaneous: six clients at once, then one more request 1.1 s later.
func simultaneous(loc location, six [6]outcome, after outcome) scenario {
	// The request 1.1 s later (the figure) is 100 ms inside the
	// burst, or 100 ms past the last delay threshold.
	sc := scenario{name: "simultaneous" + loc.path, margin: 100}
	for _, w := range six {
		sc.steps = append(sc.steps, step{0, loc.path, "sim", "", w})
	}
	sc.steps = append(sc.steps, step{1100 * ms, loc.path, "sim", "", after})
	return sc
}

// spacedAt is one arrival schedule, gaps 0.5-1.1 s, for every mode; every
// decision on it is at least 200 ms of arrival jitter away from flipping.
var spacedAt = [9]time.Duration{0, 650 * ms, 1200 * ms, 1700 * ms, 2500 * ms, 3300 * ms, 3800 * ms, 4300 * ms, 5400 * ms}

func spaced(loc location, want [9]outcome) scenario {
	sc := scenario{name: "spaced" + loc.path, margin: 200}
	for i, w := range want {
		sc.steps = append(sc.steps, step{spacedAt[i], loc.path, "spaced", "", w})
	}
	return sc
}

// mixedScenario: several zones on one request (a per-client zone at 1r/s
// and a per-group zone at 2r/s), four clients of one group at once, then
// single requests that show the all-or-nothing charging, the longest
// delay winning, a zone skipped for an empty key, and a dry-run location
// sharing both zones.
func mixedScenario() scenario {
	m, d := locMixed.path, locMixDry.path
	return scenario{name: "mixed", margin: 200, steps: []step{
		// The group zone (2r/s, burst=3 delay=1) admits 2 at once, then
		// delays 0.5 s, 1 s.
		{0, m, "mix-a", "G", passed},
		{0, m, "mix-b", "G", passed},
		{0, m, "mix-c", "G", delayed(500 * ms)},
		{0, m, "mix-d", "G", delayed(1000 * ms)},
		// The group is full: rejected (dry run: reported only); neither
		// zone is charged.
		{150 * ms, d, "mix-d", "G", dryRej},
		{300 * ms, m, "mix-a", "G", rej429},
		// Had mix-a's zone been charged at 300 ms, this would be rejected.
		{900 * ms, m, "mix-a", "G", delayed(600 * ms)},
		// The dry-run location charges the shared zones when it admits.
		{1200 * ms, d, "mix-b", "G", dryDel},
		// No g: nginx skips the group zone (ratekey: on_missing skip).
		{1500 * ms, m, "mix-e", "", passed},
		{1700 * ms, m, "mix-e", "", delayed(800 * ms)},
		// Rejected by the client zone: the group zone is not charged...
		{1900 * ms, m, "mix-e", "G", rej429},
		{2300 * ms, d, "mix-c", "G", dryDel},
		// ...as these delays show (the longer of the two zones' delays).
		{2600 * ms, m, "mix-c", "G", delayed(700 * ms)},
		{3200 * ms, m, "mix-b", "G", delayed(300 * ms)},
		{3600 * ms, m, "mix-b", "G", delayed(600 * ms)},
	}}
}

func scenarios() []scenario {
	s := time.Second
	return []scenario{
		spaced(locBurst, [9]outcome{passed, delayed(350 * ms), delayed(800 * ms), delayed(1300 * ms), delayed(1500 * ms),
			delayed(1700 * ms), rej429, delayed(1700 * ms), delayed(1600 * ms)}),
		spaced(locDelay, [9]outcome{passed, passed, passed, delayed(300 * ms), delayed(500 * ms),
			delayed(700 * ms), rej429, delayed(700 * ms), delayed(600 * ms)}),
		spaced(locNodelay, [9]outcome{passed, passed, passed, passed, passed, passed, rej429, passed, passed}),
		spaced(locNoburst, [9]outcome{passed, rej429, passed, rej429, passed, rej429, passed, rej429, passed}),
		spaced(locDefault, [9]outcome{passed, passed, passed, passed, passed, passed, rej503, passed, passed}),
		spaced(locDry, [9]outcome{passed, dryDel, dryDel, dryDel, dryDel, dryDel, dryRej, dryDel, dryDel}),

		mixedScenario(),

		// The expectations, written out.
		simultaneous(locBurst, [6]outcome{passed, delayed(1 * s), delayed(2 * s), rej429, rej429, rej429}, delayed(1900*ms)),
		simultaneous(locDelay, [6]outcome{passed, passed, delayed(1 * s), rej429, rej429, rej429}, delayed(900*ms)),
		simultaneous(locNodelay, [6]outcome{passed, passed, passed, rej429, rej429, rej429}, passed),
		simultaneous(locNoburst, [6]outcome{passed, rej429, rej429, rej429, rej429, rej429}, passed),
		simultaneous(locDefault, [6]outcome{passed, passed, passed, rej503, rej503, rej503}, passed),
		simultaneous(locDry, [6]outcome{passed, dryDel, dryDel, dryRej, dryRej, dryRej}, dryDel),
	}
}

func locationOf(path string) location {
	for _, loc := range locations {
		if loc.path == path {
			return loc
		}
	}
	panic("no location " + path)
}

// nginxModel replays nginx 1.22's limit_req arithmetic
// (ngx_http_limit_req_handler, _lookup and _account): per zone and key, an
// excess in thousandths of a request and the time of the last accounted
// request, in milliseconds. excess' = max(0, excess - rate·ms + 1000);
// rejected if excess' > burst·1000 in any zone (then no zone is charged);
// otherwise every zone is charged and the request waits the longest of
// (excess' - delay·1000)/rate ms (0 with nodelay). With unit 1e9 the same
// arithmetic runs on nanoseconds (and billionths of a request), to replay
// the times ratekey decided at.
type nginxModel struct {
	unit  int64 // clock ticks per second, and excess per request; 0 means 1000 (nginx)
	nodes map[string]*modelNode
}

type modelNode struct{ excess, last int64 }

// prediction is the model's outcome for a request, and its margin: how
// many ms of arrival-time jitter would flip the decision (-1: no state was
// involved, nothing can flip).
type prediction struct {
	outcome
	margin int64
}

func (m *nginxModel) request(now int64, loc location, q url.Values) prediction {
	if m.nodes == nil {
		m.nodes = map[string]*modelNode{}
	}
	u := cmp.Or(m.unit, 1000)
	toMS := func(ticks int64) int64 { return ticks * 1000 / u }
	type eval struct {
		l     limitReq
		id    string
		raw   int64 // excess' before the clamp at 0
		fresh bool  // no state yet: excess 0 whatever the time
	}
	var evals []eval
	for _, l := range loc.limits {
		key := q.Get(l.zone.arg)
		if key == "" {
			continue // nginx skips a zone whose key is empty
		}
		e := eval{l: l, id: l.zone.name + "\x00" + key, fresh: true}
		if n := m.nodes[e.id]; n != nil {
			e.raw, e.fresh = n.excess-l.zone.rate*max(now-n.last, 0)+u, false
		}
		evals = append(evals, e)
	}
	if len(evals) == 0 {
		return prediction{outcome{200, "", 0}, -1}
	}
	margin := int64(-1)
	over, rejected := int64(math.MinInt64), false
	for _, e := range evals {
		if !e.fresh {
			over = max(over, toMS((e.raw-e.l.burst*u)/e.l.zone.rate))
			rejected = rejected || e.raw > e.l.burst*u
		}
	}
	if over != math.MinInt64 {
		margin = max(over, -over)
	}
	if rejected {
		if loc.dryRun {
			return prediction{dryRej, margin}
		}
		return prediction{outcome{cmp.Or(loc.status, 503), "REJECTED", 0}, margin}
	}
	var delay int64 // ticks
	under := int64(math.MaxInt64)
	for _, e := range evals {
		excess := max(e.raw, 0)
		m.nodes[e.id] = &modelNode{excess: excess, last: now}
		if e.l.nodelay {
			continue
		}
		if d := excess - e.l.delay*u; d > 0 {
			delay = max(delay, d/e.l.zone.rate)
		} else if !e.fresh {
			under = min(under, toMS((e.l.delay*u-e.raw)/e.l.zone.rate))
		}
	}
	// PASSED flips to DELAYED when a zone's excess' crosses its delay; a
	// DELAYED request only waits a little less or more, unless its delay
	// is close to 0.
	flip := under
	if delay > 0 {
		flip = toMS(delay)
	}
	if flip != math.MaxInt64 && (margin < 0 || flip < margin) {
		margin = flip
	}
	switch {
	case delay == 0:
		return prediction{passed, margin}
	case loc.dryRun:
		return prediction{dryDel, margin}
	}
	return prediction{delayed(time.Duration(delay * (1e9 / u))), margin}
}

// TestTracePredictions checks the traces themselves, without nginx: the
// outcomes written in them are what nginx's arithmetic predicts on the
// nominal arrival times, and every decision outside a simultaneous group
// is at least the scenario's margin (200 ms; 100 ms for the request 1.1 s
// after a simultaneous group, the figure) of arrival jitter away
// from flipping. Inside a group, arrivals can only be later than nominal,
// which lowers the excess: a request at the edge of a delay or of the
// burst stays on the admitted, undelayed side.
func TestTracePredictions(t *testing.T) {
	for _, sc := range scenarios() {
		var m nginxModel
		for i, st := range sc.steps {
			p := m.request(st.at.Milliseconds(), locationOf(st.path), st.query())
			if p.outcome != st.want {
				t.Errorf("%s step %d (%v %s): trace says %v; nginx's arithmetic gives %v", sc.name, i+1, st.at, st.target(), st.want, p.outcome)
			}
			inGroup := (i > 0 && sc.steps[i-1].at == st.at) || (i+1 < len(sc.steps) && sc.steps[i+1].at == st.at)
			if !inGroup && p.margin >= 0 && p.margin < sc.margin {
				t.Errorf("%s step %d (%v %s): %d ms of jitter flips the decision; want >= %d", sc.name, i+1, st.at, st.target(), p.margin, sc.margin)
			}
		}
	}
}

// TestNginxArithmeticIsGCRA replays random traces (millisecond arrivals,
// one to three zones, rates that divide a second into whole milliseconds,
// every burst mode, an enforcing and a dry-run location sharing the zones,
// keys sometimes empty) through the nginx model and through ratekey's
// middleware on a manual clock: status, decision and delay agree exactly.
// nginx's excess (thousandths of a request, drained at rate·ms) is GCRA's
// debt minus one emission interval, so the two can differ only through
// rounding, which the rates chosen here avoid: ratekey rounds the emission
// interval up to a whole nanosecond, so at 3r/s (333333334 ns) it is
// stricter than nginx on an exact boundary. E.g. burst=2 nodelay, three
// requests at 0 and three at exactly 1 s: nginx admits all six (B + rate·t),
// ratekey rejects the sixth, 2 ns short; with burst=2 (delayed), the
// fourth is PASSED by nginx and DELAYED 2 ns by ratekey.
func TestNginxArithmeticIsGCRA(t *testing.T) {
	// In a testing/synctest bubble: a DELAYED request's wait (a real timer)
	// passes at once on the bubble's clock, which tells how long it was.
	synctest.Test(t, testNginxArithmeticIsGCRA)
}

func testNginxArithmeticIsGCRA(t *testing.T) {
	rates := []int64{1, 2, 4, 5, 10}
	rng := rand.New(rand.NewPCG(20260101, 3))
	kinds := map[string]int{} // decisions seen: the traces must reach every case
	for trial := range 150 {
		var limits []limitReq
		for i := range 1 + rng.IntN(3) {
			z := zone{name: fmt.Sprintf("z%d", i), arg: "k", rate: rates[rng.IntN(len(rates))]}
			if i > 0 && rng.IntN(2) == 0 {
				z.arg = "g"
			}
			l := limitReq{zone: z, burst: rng.Int64N(5)}
			switch rng.IntN(3) {
			case 0:
				l.nodelay = true
			case 1:
				if l.burst > 1 {
					l.delay = 1 + rng.Int64N(l.burst-1)
				}
			}
			limits = append(limits, l)
		}
		locs := []location{{path: "/e", limits: limits, status: 429}, {path: "/d", limits: limits, dryRun: true}}
		clock := clocktest.NewManualClock()
		store := memory.New(memory.Options{Now: clock.Time})
		handlers := map[string]http.Handler{}
		for _, loc := range locs {
			cfg := ratekeyConfig(loc, store, func(*http.Request) string { return "GET " + loc.path }, slog.New(slog.DiscardHandler))
			rl, err := middleware.NewRateLimiter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			handlers[loc.path] = rl.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		}
		var model nginxModel
		now := int64(0)
		var history []string
		for i := range 40 {
			if rng.IntN(3) > 0 {
				now += rng.Int64N(1500)
			}
			clock.Set(time.Duration(now) * ms)
			loc := locs[0]
			if rng.IntN(5) == 0 {
				loc = locs[1]
			}
			q := url.Values{"k": {[]string{"a", "b"}[rng.IntN(2)]}}
			if g := []string{"x", "y", ""}[rng.IntN(3)]; g != "" {
				q.Set("g", g)
			}
			want := model.request(now, loc, q).outcome
			w := httptest.NewRecorder()
			start := time.Now()
			handlers[loc.path].ServeHTTP(w, httptest.NewRequest(http.MethodGet, loc.path+"?"+q.Encode(), nil))
			got := outcome{w.Code, w.Header().Get("RateLimit-Decision"), time.Since(start)}
			history = append(history, fmt.Sprintf("  t=%dms %s?%s: nginx %v, ratekey %v", now, loc.path, q.Encode(), want, got))
			kinds[got.decision]++
			if got != want {
				t.Fatalf("trial %d, request %d: ratekey %v; nginx's arithmetic %v\nlimits %+v\n%s", trial, i+1, got, want, limits, strings.Join(history, "\n"))
			}
		}
	}
	for _, d := range []string{"PASSED", "DELAYED", "REJECTED", "DELAYED_DRY_RUN", "REJECTED_DRY_RUN"} {
		if kinds[d] < 100 {
			t.Errorf("only %d %s decisions in the random traces (%v); want >= 100", kinds[d], d, kinds)
		}
	}
}

// ---------------------------------------------------------------------------
// The live differential test.

// startNginx runs nginx on a free loopback port with every path under
// dir, and returns its address.
func startNginx(t *testing.T, nginx, dir string) string {
	t.Helper()
	return servertest.StartNginx(t, nginx, dir, func(port int) string { return nginxConf(dir, port) })
}

// startRatekey serves every location from one chi router on a real
// loopback listener: one RateLimiter per location over one memory store,
// its real wait (a timer). The store runs on the process's
// monotonic clock through a recorder, which also tells when each request
// was decided.
func startRatekey(t *testing.T, logs io.Writer) (string, *recorder) {
	t.Helper()
	rec := &recorder{clock: clocktest.NewManualClock(), base: time.Now(), decided: map[string]decided{}}
	rec.inner = memory.New(memory.Options{Now: rec.clock.Time})
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ridKey{}, r.URL.Query().Get("rid"))))
		})
	})
	op := middleware.RouteOperation(r)
	logger := slog.New(slog.NewTextHandler(logs, nil))
	for _, loc := range locations {
		rl, err := middleware.NewRateLimiter(ratekeyConfig(loc, rec, op, logger))
		if err != nil {
			t.Fatal(err)
		}
		r.With(rl.Handler).Get(loc.path, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok\n")
		})
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), rec
}

// ridKey carries a request's "rid" argument to the recorder.
type ridKey struct{}

// recorder is the ratekey server's limiter.Limiter: the memory store, whose
// clock it sets to the process's monotonic time (since base) at each call,
// one call at a time (as nginx's single worker decides one request at a
// time), so that it knows the exact time each request was decided at, and
// the delay the middleware applies (the longest Delay of the enforcing
// policies, if they all admit the request).
type recorder struct {
	mu      sync.Mutex
	inner   *memory.Limiter
	clock   *clocktest.ManualClock
	base    time.Time
	decided map[string]decided // by rid
}

// decided is when a server decided a request, on its clock (-1: unknown),
// and the delay it applied (-1: unknown, as for nginx).
type decided struct {
	at   int64
	wait time.Duration
}

func (r *recorder) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Since(r.base)
	r.clock.Set(now)
	n0 := len(dst)
	dst, err := r.inner.Take(ctx, dst, reqs)
	if rid, _ := ctx.Value(ridKey{}).(string); rid != "" && err == nil {
		var wait time.Duration
		admitted := true
		for i, d := range dst[n0:] {
			if !reqs[i].DryRun {
				admitted = admitted && d.Allowed
				wait = max(wait, d.Delay)
			}
		}
		if !admitted {
			wait = 0
		}
		r.decided[rid] = decided{int64(now), wait}
	}
	return dst, err
}

func (r *recorder) Peek(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock.Set(time.Since(r.base))
	return r.inner.Peek(ctx, dst, reqs)
}

// Release passes through: nginxdiff's policies are token buckets.
func (r *recorder) Release(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	return r.inner.Release(ctx, reqs, ds)
}

// Settle passes through: nginxdiff's policies do not settle.
func (r *recorder) Settle(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision, actual []int64) error {
	return r.inner.Settle(ctx, reqs, ds, actual)
}

// arrivals returns when ratekey decided each request, in ns since base,
// and the delay it applied.
func (r *recorder) arrivals(rids []string) []decided {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]decided, len(rids))
	for i, rid := range rids {
		out[i] = decided{-1, -1}
		if d, ok := r.decided[rid]; ok {
			out[i] = d
		}
	}
	return out
}

// nginxArrivals returns when nginx started each request, in ms since the
// Unix epoch (-1 if not found), from its access log ("$msec $request_uri
// ... $request_time": $msec - $request_time is the request's start on
// nginx's cached millisecond clock, the time limit_req decided at). nginx
// logs a request just after answering it, so a line may lag its response:
// the log is read again for up to a second until every request is there.
func nginxArrivals(path string, rids []string) []decided {
	out := make([]decided, len(rids))
	for try := 0; try < 20; try++ {
		b, _ := os.ReadFile(path)
		start := map[string]int64{}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			u, err1 := url.Parse(f[1])
			end, err2 := strconv.ParseFloat(f[0], 64)
			took, err3 := strconv.ParseFloat(f[len(f)-1], 64)
			if err1 == nil && err2 == nil && err3 == nil {
				start[u.Query().Get("rid")] = int64(math.Round(end*1000)) - int64(math.Round(took*1000))
			}
		}
		missing := false
		for i, rid := range rids {
			at, ok := start[rid]
			if !ok {
				at, missing = -1, true
			}
			out[i] = decided{at, -1}
		}
		if !missing {
			break
		}
		time.Sleep(50 * ms)
	}
	return out
}

// server is one side of the comparison.
type server struct {
	name, addr string
	field      string // the response field that carries the decision
	// arrivals returns when the server decided each request (by rid), on
	// its clock of unit ticks per second, and the delay it applied if it
	// says; clock converts a time of the test's to that clock.
	arrivals func(rids []string) []decided
	unit     int64
	clock    func(time.Time) int64
}

// observed is one response as the client saw it.
type observed struct {
	outcome
	begin, end time.Time // the write, the end of the response
	err        error
}

// trial is one run of a trace against every server.
type trial struct {
	res  [][]observed // per server, per step
	rids []string     // per step
	t0   time.Time
	err  error
}

// requestIDs numbers every request sent (the "rid" argument, which no
// policy reads), to find it in the servers' records.
var requestIDs atomic.Int64

// runTrace sends the steps to every server. Each request has its own
// connection, dialled before the start (so simultaneous requests are not
// serialised by connection setup or reuse); one goroutine per step waits
// on a start barrier, then until its offset, then writes the request to
// every server back to back, so both servers see the same arrival times
// even when the client runs late. The delay is measured from the write to
// the end of the response. tag is appended to every key, so that a rerun
// starts from fresh buckets.
func runTrace(servers []server, steps []step, tag string) trial {
	tr := trial{res: make([][]observed, len(servers)), rids: make([]string, len(steps))}
	conns := make([][]net.Conn, len(servers))
	defer func() {
		for _, cs := range conns {
			for _, c := range cs {
				c.Close()
			}
		}
	}()
	for i, s := range servers {
		tr.res[i] = make([]observed, len(steps))
		for range steps {
			c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
			if err != nil {
				tr.err = err
				return tr
			}
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			conns[i] = append(conns[i], c)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for j, st := range steps {
		st.k += tag
		if st.g != "" {
			st.g += tag
		}
		rid := fmt.Sprint(requestIDs.Add(1))
		tr.rids[j] = rid
		reqs := make([]*http.Request, len(servers))
		for i, s := range servers {
			reqs[i], _ = http.NewRequest(http.MethodGet, "http://"+s.addr+st.target()+"&rid="+rid, nil)
			reqs[i].Close = true
		}
		wg.Go(func() {
			<-start
			time.Sleep(time.Until(tr.t0.Add(st.at)))
			begins := make([]time.Time, len(servers))
			for i := range servers {
				begins[i] = time.Now()
				if err := reqs[i].Write(conns[i][j]); err != nil {
					tr.res[i][j].err = err
				}
			}
			var rwg sync.WaitGroup
			for i, s := range servers {
				if tr.res[i][j].err == nil {
					rwg.Go(func() { tr.res[i][j] = receive(conns[i][j], reqs[i], s.field, begins[i]) })
				}
			}
			rwg.Wait()
		})
	}
	tr.t0 = time.Now()
	close(start)
	wg.Wait()
	return tr
}

func receive(c net.Conn, req *http.Request, field string, begin time.Time) observed {
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return observed{err: err}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	end := time.Now()
	return observed{outcome{resp.StatusCode, resp.Header.Get(field), end.Sub(begin)}, begin, end, err}
}

// explain replays nginx's arithmetic on the times a server decided the
// trial's requests at, in the order it decided them, and returns the
// answers that this does not account for: a status or decision other than
// predicted; an applied delay (ratekey says which) other than predicted;
// an answer earlier than the predicted delay; or, from ratekey, which runs
// in this process, an answer later than that by more than the tolerance
// while the process was not stalled for at least half the excess. (nginx
// is the reference: its late answers need no excuse.) Requests decided at
// the same tick are compared as a multiset. The second result is how late
// the server decided a request after its offset in the trace.
func explain(s server, steps []step, tr trial, obs []observed, meter *stallMeter) (problems []string, late time.Duration) {
	arr := s.arrivals(tr.rids)
	order := make([]int, len(steps))
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(arr[a].at, arr[b].at) })
	model := nginxModel{unit: s.unit}
	tick := time.Second / time.Duration(s.unit)
	since := func(j int) time.Duration { return time.Duration(arr[j].at-s.clock(tr.t0)) * tick }
	pred := make([]outcome, len(steps))
	for _, j := range order {
		if arr[j].at < 0 {
			problems = append(problems, fmt.Sprintf("%s: no record of request %d (rid %s)", s.name, j+1, tr.rids[j]))
			continue
		}
		pred[j] = model.request(arr[j].at, locationOf(steps[j].path), steps[j].query()).outcome
		late = max(late, since(j)-steps[j].at)
	}
	type answer struct {
		j int
		o observed
	}
	for lo := 0; lo < len(order); {
		hi := lo + 1
		for hi < len(order) && arr[order[hi]].at == arr[order[lo]].at {
			hi++
		}
		var want []outcome
		var got []answer
		for _, j := range order[lo:hi] {
			want = append(want, pred[j])
			got = append(got, answer{j, obs[j]})
		}
		slices.SortFunc(want, byOutcome)
		slices.SortFunc(got, func(a, b answer) int { return byOutcome(a.o.outcome, b.o.outcome) })
		for k, w := range want {
			j, g, wait := got[k].j, got[k].o, arr[got[k].j].wait
			var why string
			switch {
			case g.err != nil:
				why = g.err.Error()
			case g.status != w.status || g.decision != w.decision:
				why = "another decision"
			case wait >= 0 && wait != w.delay:
				why = fmt.Sprintf("it applied a delay of %v", wait)
			case g.delay < w.delay-delayTolerance:
				why = "an early answer"
			case wait >= 0 && g.delay > w.delay+delayTolerance && meter.stalled(g.begin, g.end) < (g.delay-w.delay-delayTolerance)/2:
				why = fmt.Sprintf("a late answer, though the process stalled only %v meanwhile", meter.stalled(g.begin, g.end).Round(ms))
			default:
				continue
			}
			problems = append(problems, fmt.Sprintf("%s decided request %d (%s) %v after the start: got %s, nginx's arithmetic at that time gives %s (%s)",
				s.name, j+1, steps[j].target(), since(j).Round(time.Microsecond), show(g.outcome), show(w), why))
		}
		lo = hi
	}
	return problems, late
}

// stallMeter watches the test process's timekeeping: a goroutine that
// sleeps 2 ms at a time records every wake-up later than 10 ms, the time
// the process (hence ratekey's server and timers, and the client) was kept
// from running.
type stallMeter struct {
	mu     sync.Mutex
	stalls []stall
}

type stall struct{ from, to time.Time }

func startStallMeter(t *testing.T) *stallMeter {
	m := &stallMeter{}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		const tick = 2 * ms
		for {
			before := time.Now()
			select {
			case <-done:
				return
			case <-time.After(tick):
			}
			if now := time.Now(); now.Sub(before)-tick > 10*ms {
				m.mu.Lock()
				m.stalls = append(m.stalls, stall{before.Add(tick), now})
				m.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(done); <-exited })
	return m
}

// stalled returns how long the process was stalled between from and to.
func (m *stallMeter) stalled(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum time.Duration
	for _, s := range m.stalls {
		lo, hi := s.from, s.to
		if from.After(lo) {
			lo = from
		}
		if to.Before(hi) {
			hi = to
		}
		if d := hi.Sub(lo); d > 0 {
			sum += d
		}
	}
	return sum
}

// delayTolerance bounds the difference between two completion delays, and
// between a completion delay and the predicted one (the 150 ms:
// nginx's millisecond clock, timer and scheduling jitter on a loaded
// machine, and -race).
const delayTolerance = 150 * ms

// stagger separates the starts of the scenarios; the longest traces come
// first in scenarios().
const stagger = 300 * ms

// attempts bounds the runs of a scenario; see TestAgainstNginx.
const attempts = 3

func near(a, b time.Duration) bool { return (a - b).Abs() <= delayTolerance }

// byOutcome orders a group's outcomes for pairing and display: by
// decision (PASSED first, REJECTED last), then status, then delay.
func byOutcome(a, b outcome) int {
	rank := func(d string) int {
		return slices.Index([]string{"PASSED", "DELAYED", "DELAYED_DRY_RUN", "REJECTED_DRY_RUN", "REJECTED"}, d)
	}
	return cmp.Or(cmp.Compare(rank(a.decision), rank(b.decision)), cmp.Compare(a.status, b.status), cmp.Compare(a.delay, b.delay))
}

// report is the checked outcome of a scenario: its table, its problems,
// and notes on runs the machine's load disturbed.
type report struct {
	table    string
	problems []string
	notes    []string
}

// TestAgainstNginx fires the same traces at a real nginx and at ratekey
// and compares each response: status, decision (nginx's $limit_req_status,
// ratekey's RateLimit-Decision) and completion delay (within 150 ms); each
// must also match the outcome written in the trace. Simultaneous requests
// are compared as multisets. The scenarios use distinct keys and all run
// at once, staggered (not as parallel subtests, which -parallel would cap
// at GOMAXPROCS), so the test takes about as long as the longest trace,
// 7 s; then one subtest per scenario reports, with its table.
//
// Every run also replays each server's answers through nginx's arithmetic
// at the times that server actually decided them (nginx's access log;
// ratekey's recorder, which also gives the delay ratekey applied, to be
// equal to nginx's arithmetic to the nanosecond); see explain. An answer
// that this does not account for is a divergence and fails the test at
// once. On a loaded machine a process can be kept off the CPU for hundreds
// of milliseconds, and a trace then reaches the servers late: a run whose
// mismatches with the trace are all accounted for that way was disturbed,
// not wrong. It is repeated with fresh keys, up to 3 runs, and if none
// runs clean the scenario passes with a note (both servers still followed
// nginx's arithmetic on every request).
func TestAgainstNginx(t *testing.T) {
	nginx := servertest.RequireNginx(t)
	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	ratekeyLogs := &servertest.Buffer{}
	ratekeyAddr, rec := startRatekey(t, ratekeyLogs)
	servers := []server{
		{name: "nginx", addr: startNginx(t, nginx, dir), field: "X-Limit-Req-Status", unit: 1000,
			arrivals: func(rids []string) []decided { return nginxArrivals(accessLog, rids) },
			clock:    func(t time.Time) int64 { return t.UnixMilli() }},
		{name: "ratekey", addr: ratekeyAddr, field: "RateLimit-Decision", unit: 1e9,
			arrivals: rec.arrivals,
			clock:    func(t time.Time) int64 { return int64(t.Sub(rec.base)) }},
	}
	meter := startStallMeter(t)
	scs := scenarios()
	reports := make([]report, len(scs))
	var wg sync.WaitGroup
	for i, sc := range scs {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * stagger)
			rep := &reports[i]
			for a := 1; a <= attempts; a++ {
				tag := ""
				if a > 1 {
					tag = fmt.Sprintf("-run%d", a)
				}
				tr := runTrace(servers, sc.steps, tag)
				if tr.err != nil {
					rep.problems = []string{tr.err.Error()}
					return
				}
				var mismatches []string
				rep.table, mismatches = compare(sc.steps, tr.res[0], tr.res[1])
				var unexplained, lates []string
				for k, s := range servers {
					p, late := explain(s, sc.steps, tr, tr.res[k], meter)
					unexplained = append(unexplained, p...)
					lates = append(lates, fmt.Sprintf("%s up to %v", s.name, late.Round(ms)))
				}
				if len(unexplained) > 0 {
					rep.problems = append(mismatches, unexplained...)
					return
				}
				if len(mismatches) == 0 {
					return
				}
				rep.notes = append(rep.notes, fmt.Sprintf("run %d was disturbed (requests decided late: %s; answers late): every answer matches nginx's arithmetic at the times each server decided it, but not the trace:\n  %s\n%s",
					a, strings.Join(lates, ", "), strings.Join(mismatches, "\n  "), rep.table))
			}
			rep.notes = append(rep.notes, fmt.Sprintf("no clean run in %d: the machine is too busy to keep the trace's schedule; the table is the last run's", attempts))
		})
	}
	wg.Wait()
	for i, sc := range scs {
		t.Run(sc.name, func(t *testing.T) {
			for _, n := range reports[i].notes {
				t.Log(n)
			}
			if reports[i].table != "" {
				t.Log(reports[i].table)
			}
			for _, p := range reports[i].problems {
				t.Error(p)
			}
		})
	}
	if t.Failed() {
		for _, f := range []string{"access.log", "error.log"} {
			b, _ := os.ReadFile(filepath.Join(dir, f))
			t.Logf("nginx %s:\n%s", f, b)
		}
		t.Logf("ratekey log:\n%s", ratekeyLogs.String())
	}
}

// compare checks one trace's responses against each other and against the
// trace, and renders its table. Groups of simultaneous steps are sorted by
// outcome on each side before pairing.
func compare(steps []step, ngx, rk []observed) (string, []string) {
	var problems []string
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-4s %6s  %-26s | %-29s | %-29s | %s\n", "#", "at", "request", "nginx", "ratekey", "expected")
	for lo := 0; lo < len(steps); {
		hi := lo + 1
		for hi < len(steps) && steps[hi].at == steps[lo].at {
			hi++
		}
		want := make([]outcome, 0, hi-lo)
		var gotN, gotR []observed
		for j := lo; j < hi; j++ {
			want = append(want, steps[j].want)
			gotN = append(gotN, ngx[j])
			gotR = append(gotR, rk[j])
		}
		if hi-lo > 1 {
			slices.SortFunc(want, byOutcome)
			sortObs := func(o []observed) {
				slices.SortFunc(o, func(a, b observed) int { return byOutcome(a.outcome, b.outcome) })
			}
			sortObs(gotN)
			sortObs(gotR)
		}
		for j := range want {
			n, r, w := gotN[j], gotR[j], want[j]
			label := fmt.Sprint(lo + j + 1)
			req := steps[lo+j].target()
			if hi-lo > 1 {
				label = fmt.Sprintf("%d-%d", lo+1, hi)
				req = fmt.Sprintf("%s (sorted)", steps[lo].path)
			}
			at := steps[lo].at
			mark := ""
			switch {
			case n.err != nil || r.err != nil:
				problems = append(problems, fmt.Sprintf("request %s %s: nginx error %v, ratekey error %v", label, req, n.err, r.err))
				mark = " !"
			case n.status != r.status || n.decision != r.decision || !near(n.delay, r.delay):
				problems = append(problems, fmt.Sprintf("request %s %s at %v: nginx %s, ratekey %s: they differ", label, req, at, show(n.outcome), show(r.outcome)))
				mark = " !"
			}
			for _, o := range []struct {
				name string
				got  observed
			}{{"nginx", n}, {"ratekey", r}} {
				if o.got.err == nil && (o.got.status != w.status || o.got.decision != w.decision || !near(o.got.delay, w.delay)) {
					problems = append(problems, fmt.Sprintf("request %s %s at %v: %s %s; want %s", label, req, at, o.name, show(o.got.outcome), show(w)))
					mark = " !"
				}
			}
			fmt.Fprintf(&table, "%-4s %6d  %-26s | %-29s | %-29s | %s%s\n", label, at.Milliseconds(), req, show(n.outcome), show(r.outcome), show(w), mark)
		}
		lo = hi
	}
	return table.String(), problems
}

func show(o outcome) string {
	d := cmp.Or(o.decision, `""`)
	return fmt.Sprintf("%d %-16s %5dms", o.status, d, o.delay.Milliseconds())
}
