// Command benchtable reads the output of the bench module's benchmarks
// (go test -bench, any -count, one or more files) and prints the ratio
// table of BENCHMARKS.md: for every target of issue 8, ratekey's number
// over the peer's, the median over runs, and PASS or FAIL; then the
// absolute numbers, as indicative.
//
//	go run ./cmd/benchtable results/raw.txt
//
// Ratios are computed run by run from the interleaved benchmarks (both
// sides measured in the same run, under the same load) and the median of
// those ratios is reported; absolute numbers are medians over runs.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// run is one benchmark line: metric unit → value.
type run map[string]float64

// results maps a benchmark name (without the -GOMAXPROCS suffix) to its
// runs in input order.
type results map[string][]run

func read(files []string) (results, error) {
	res := results{}
	for _, f := range files {
		var r io.Reader
		if f == "-" {
			r = os.Stdin
		} else {
			fh, err := os.Open(f)
			if err != nil {
				return nil, err
			}
			defer fh.Close()
			r = fh
		}
		br := benchfmt.NewReader(r, f)
		for br.Scan() {
			rec, ok := br.Result().(*benchfmt.Result)
			if !ok {
				continue
			}
			base, parts := rec.Name.Parts()
			name := string(base)
			for _, p := range parts {
				if !strings.HasPrefix(string(p), "-") {
					name += string(p)
				}
			}
			name = strings.TrimPrefix(name, "Benchmark")
			m := run{}
			for _, v := range rec.Values {
				unit, val := v.OrigUnit, v.OrigValue
				if unit == "" {
					unit, val = v.Unit, v.Value
				}
				m[unit] = val
			}
			res[name] = append(res[name], m)
		}
		if err := br.Err(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func median(xs []float64) float64 {
	xs = slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(xs) == 0 {
		return math.NaN()
	}
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// med is the median of unit over the runs of name.
func (r results) med(name, unit string) float64 {
	return median(r.each(name, func(m run) float64 { return get(m, unit) }))
}

// each applies f to every run of name.
func (r results) each(name string, f func(run) float64) []float64 {
	var out []float64
	for _, m := range r[name] {
		out = append(out, f(m))
	}
	return out
}

func get(m run, unit string) float64 {
	v, ok := m[unit]
	if !ok {
		return math.NaN()
	}
	return v
}

// span is "min-max" of xs (NaN dropped), or "–".
func span(xs []float64, prec int) string {
	xs = slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(xs) == 0 {
		return "–"
	}
	return f(slices.Min(xs), prec) + "-" + f(slices.Max(xs), prec)
}

func verdict(ok bool, v float64) string {
	switch {
	case math.IsNaN(v):
		return "not run"
	case ok:
		return "PASS"
	}
	return "FAIL"
}

func f(v float64, prec int) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// ns formats nanoseconds with a unit that suits the magnitude.
func ns(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 1e6:
		return fmt.Sprintf("%.2f ms", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1f µs", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.2f µs", v/1e3)
	}
	return fmt.Sprintf("%.0f ns", v)
}

// zeroAllocs is the reading of "0 allocs/op" used for amortised averages
// over many operations: fewer than one allocation per 100 operations (Go's
// own allocs/op, an integer, prints 0 for anything below 1).
const zeroAllocs = 0.01

var keyedPeers = []string{"xtime-mutex", "xtime-sharded", "throttled", "go-limiter", "ulule", "httprate"}

type table struct {
	w    io.Writer
	rows int
}

func (t *table) header(cols ...string) {
	fmt.Fprintf(t.w, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat(" --- |", len(cols)))
}

func (t *table) row(cols ...string) {
	fmt.Fprintf(t.w, "| %s |\n", strings.Join(cols, " | "))
	t.rows++
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchtable results.txt...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	r, err := read(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	w := os.Stdout
	t := &table{w: w}
	var pass, fail, missing int
	count := func(v string) string {
		switch v {
		case "PASS":
			pass++
		case "FAIL":
			fail++
		default:
			missing++
		}
		return v
	}

	fmt.Fprintln(w, "## Targets (ratios are medians of per-run ratios; ratekey / peer unless stated)")
	fmt.Fprintln(w)
	t.header("target", "workload", "measured", "threshold", "verdict")

	// Keyed in-memory decision.
	for _, keys := range []string{"100k", "1M"} {
		for _, p := range []string{"1", "3"} {
			name := "Keyed/keys=" + keys + "/policies=" + p
			ratios := r.each(name, func(m run) float64 {
				best := math.Inf(1)
				for _, peer := range keyedPeers {
					if v := get(m, peer+"-ns/op"); v < best {
						best = v
					}
				}
				return get(m, "ratekey-ns/op") / best
			})
			fastest, fastNs := "", math.Inf(1)
			for _, peer := range keyedPeers {
				if v := r.med(name, peer+"-ns/op"); v < fastNs {
					fastest, fastNs = peer, v
				}
			}
			ratio := median(ratios)
			cpuRatio := median(r.each(name, func(m run) float64 {
				best := math.Inf(1)
				for _, peer := range keyedPeers {
					if v := get(m, peer+"-cpu-ns/op"); v < best {
						best = v
					}
				}
				return get(m, "ratekey-cpu-ns/op") / best
			}))
			allocs := r.med(name, "ratekey-allocs/op")
			tgt := "keyed decision"
			if keys == "1M" {
				tgt = "keyed decision (1M: shown, target is 100k)"
			}
			v := verdict(ratio <= 0.5 && allocs < zeroAllocs, ratio)
			if keys == "100k" {
				v = count(v)
			} else if v != "not run" {
				v = "(" + v + ")"
			}
			t.row(tgt, fmt.Sprintf("%s keys, %s polic%s, parallel", keys, p, map[bool]string{true: "y", false: "ies"}[p == "1"]),
				fmt.Sprintf("%s× fastest peer (%s); by CPU time %s×; %s allocs/op", f(ratio, 2), fastest, f(cpuRatio, 2), f(allocs, 4)),
				"≤ 0.5×, 0 allocs", v)
		}
	}

	// Bytes per key.
	bk := r.med("MemoryPerKey/peer=ratekey", "B/key")
	t.row("bytes per tracked key", "1M keys, memory store", f(bk, 1)+" B", "≤ 32 B", count(verdict(bk <= 32, bk)))

	// Client IP.
	for _, pf := range []string{"3", "2000"} {
		th := 1.0
		if pf == "2000" {
			th = 0.1
		}
		for _, hops := range []string{"1", "3", "10"} {
			name := "ClientIP/prefixes=" + pf + "/hops=" + hops
			ratio := median(r.each(name, func(m run) float64 { return get(m, "ratekey-ns/op") / get(m, "chi-ns/op") }))
			like := median(r.each(name, func(m run) float64 { return get(m, "ratekey-mw-ns/op") / get(m, "chi-ns/op") }))
			allocs := r.med(name, "ratekey-allocs/op")
			wl := fmt.Sprintf("%s prefixes, %s-entry XFF", pf, hops)
			t.row("client IP: Resolve vs chi ClientIPFromXFF", wl,
				fmt.Sprintf("%s×; %s allocs/op", f(ratio, 3), f(allocs, 2)),
				fmt.Sprintf("≤ %g×, 0 allocs", th), count(verdict(ratio <= th && allocs < zeroAllocs, ratio)))
			t.row("client IP, like for like: Resolve + context vs chi", wl,
				f(like, 3)+"×", fmt.Sprintf("≤ %g×", th), count(verdict(like <= th, like)))
		}
	}

	// Whole chain. The target names ratekey's pieces (resolve, cached
	// JWT, operation, 2 policies), so its verdict is on what they add to
	// the bare chi router serving the same requests in the same run; the
	// absolute figures are shown beside it. "ratekey" is the front door
	// (ratekey.New mounted on the router), "hand" the same chain composed
	// by hand from the middleware package, measured in the same run.
	chainNs := r.med("Chain", "ratekey-ns/op")
	chainCPU := r.med("Chain", "ratekey-cpu-ns/op")
	overNs := median(r.each("Chain", func(m run) float64 { return get(m, "ratekey-ns/op") - get(m, "chi-ns/op") }))
	overCPU := median(r.each("Chain", func(m run) float64 { return get(m, "ratekey-cpu-ns/op") - get(m, "chi-cpu-ns/op") }))
	chainAllocs := r.med("Chain", "ratekey-allocs/op")
	overAllocs := median(r.each("Chain", func(m run) float64 { return get(m, "ratekey-allocs/op") - get(m, "chi-allocs/op") }))
	t.row("whole chain in process (front door): ratekey's cost over bare chi", "XFF + cached ES256 + operation + 2 policies, parallel",
		fmt.Sprintf("%s/request (CPU %s/request); whole request %s (CPU %s)", ns(overNs), ns(overCPU), ns(chainNs), ns(chainCPU)),
		"≤ 1.5 µs", count(verdict(overNs <= 1500, overNs)))
	t.row("whole chain in process (front door): ratekey's cost over bare chi", "allocations",
		fmt.Sprintf("%s allocs/request; whole request %s", f(overAllocs, 2), f(chainAllocs, 2)), "≤ 5", count(verdict(overAllocs <= 5, overAllocs)))
	// The front door against the chain composed by hand: the ratio of
	// their costs over bare chi, run by run. 1.0× is the same cost; the
	// threshold allows 5% for noise (the per-run range is shown).
	fvh := r.each("Chain", func(m run) float64 {
		return (get(m, "ratekey-ns/op") - get(m, "chi-ns/op")) / (get(m, "hand-ns/op") - get(m, "chi-ns/op"))
	})
	fvhCPU := median(r.each("Chain", func(m run) float64 {
		return (get(m, "ratekey-cpu-ns/op") - get(m, "chi-cpu-ns/op")) / (get(m, "hand-cpu-ns/op") - get(m, "chi-cpu-ns/op"))
	}))
	handOver := median(r.each("Chain", func(m run) float64 { return get(m, "hand-ns/op") - get(m, "chi-ns/op") }))
	fv := median(fvh)
	t.row("front door vs the chain composed by hand, in process", "cost over bare chi, front door / hand",
		fmt.Sprintf("%s× (runs %s); by CPU time %s×; %s against %s over chi", f(fv, 3), span(fvh, 2), f(fvhCPU, 3), ns(overNs), ns(handOver)),
		"≤ 1.05× (1.0× + noise)", count(verdict(fv <= 1.05, fv)))
	handAllocs := r.med("Chain", "hand-allocs/op")
	t.row("front door vs the chain composed by hand, in process", "allocations per request",
		fmt.Sprintf("%s against %s", f(chainAllocs, 2), f(handAllocs, 2)),
		"≤ hand's", count(verdict(chainAllocs <= handAllocs+zeroAllocs, chainAllocs-handAllocs)))
	lbs := r.each("Loopback", func(m run) float64 { return get(m, "ratekey/chi") })
	lb := median(lbs)
	t.row("whole chain over loopback HTTP (front door)", "throughput vs bare chi", fmt.Sprintf("%s× (runs %s)", f(lb, 3), span(lbs, 2)),
		"≥ 0.9×", count(verdict(lb >= 0.9, lb)))
	lbh := median(r.each("Loopback", func(m run) float64 { return get(m, "hand/chi") }))
	v := verdict(lbh >= 0.9, lbh)
	if v != "not run" {
		v = "(" + v + ")"
	}
	t.row("whole chain over loopback HTTP (composed by hand: shown, the target is the front door's)", "throughput vs bare chi", f(lbh, 3)+"×", "≥ 0.9×", v)
	lfhs := r.each("Loopback", func(m run) float64 { return get(m, "ratekey/hand") })
	lfh := median(lfhs)
	t.row("front door vs the chain composed by hand, loopback HTTP", "throughput, front door / hand",
		fmt.Sprintf("%s× (runs %s)", f(lfh, 3), span(lfhs, 2)), "≥ 0.95× (1.0× − noise)", count(verdict(lfh >= 0.95, lfh)))
	// The front door against the peer stack (issue 26): chi's
	// ClientIPFromXFF, go-chi/jwtauth and httprate doing the same work on
	// the same requests in the same run.
	lps := r.each("Loopback", func(m run) float64 { return get(m, "ratekey/peer") })
	lp := median(lps)
	t.row("front door vs the peer stack (chi ClientIPFromXFF + jwtauth + httprate), loopback HTTP", "throughput, front door / peer stack",
		fmt.Sprintf("%s× (runs %s); peer stack / bare chi %s×", f(lp, 3), span(lps, 2), f(median(r.each("Loopback", func(m run) float64 { return get(m, "peer/chi") })), 3)),
		"≥ 1.0×", count(verdict(lp >= 1.0, lp)))
	peerOver := median(r.each("Chain", func(m run) float64 { return get(m, "peer-ns/op") - get(m, "chi-ns/op") }))
	peerAllocs := median(r.each("Chain", func(m run) float64 { return get(m, "peer-allocs/op") - get(m, "chi-allocs/op") }))
	fvp := median(r.each("Chain", func(m run) float64 {
		return (get(m, "ratekey-ns/op") - get(m, "chi-ns/op")) / (get(m, "peer-ns/op") - get(m, "chi-ns/op"))
	}))
	t.row("front door vs the peer stack, in process (shown)", "cost over bare chi, front door / peer stack",
		fmt.Sprintf("%s×; %s and %s allocs against %s and %s allocs over chi", f(fvp, 3), ns(overNs), f(overAllocs, 2), ns(peerOver), f(peerAllocs, 2)),
		"–", "(shown)")

	// JWT.
	for _, alg := range []string{"ES256", "RS256"} {
		name := "JWT/alg=" + alg
		sp := median(r.each(name, func(m run) float64 { return get(m, "speedup") }))
		against := "nocache"
		if math.IsNaN(r.med(name, "nocache-ns/op")) {
			against = "fresh token"
		}
		t.row("repeated-token JWT verification", alg+", vs "+against, f(sp, 1)+"× faster", "≥ 20×", count(verdict(sp >= 20, sp)))
	}

	// Redis.
	for _, p := range []string{"1", "3"} {
		th := 1.0
		if p == "3" {
			th = 2.0
		}
		for _, c := range []string{"1", "16"} {
			name := "PeersInterleaved/policies=" + p + "/clients=" + c
			ratio := median(r.each(name, func(m run) float64 { return get(m, "ratio") }))
			t.row("Redis decisions/s vs redis_rate", fmt.Sprintf("%s polic%s, %s client(s)", p, map[bool]string{true: "y", false: "ies"}[p == "1"], c),
				f(ratio, 2)+"×", fmt.Sprintf("≥ %g×", th), count(verdict(ratio >= th, ratio)))
		}
	}
	settleRows(r, t, count)
	grpcRows(r, t, count)
	fmt.Fprintf(w, "\n%d PASS, %d FAIL, %d not run.\n", pass, fail, missing)

	// Absolute numbers.
	fmt.Fprintln(w, "\n## Absolute numbers (medians over runs; indicative only on a shared machine)")
	fmt.Fprintln(w, "\n### Keyed in-memory decision, per request: wall ns (RunParallel convention) · CPU ns · allocs · admitted fraction")
	fmt.Fprintln(w)
	var wls []string
	for _, keys := range []string{"100k", "1M"} {
		for _, p := range []string{"1", "3"} {
			wls = append(wls, "Keyed/keys="+keys+"/policies="+p)
		}
	}
	t.header("limiter", "100k keys, 1 policy", "100k keys, 3 policies", "1M keys, 1 policy", "1M keys, 3 policies")
	for _, peer := range append([]string{"ratekey"}, keyedPeers...) {
		row := []string{peer}
		for _, name := range wls {
			row = append(row, fmt.Sprintf("%s · %s · %s · %s", f(r.med(name, peer+"-ns/op"), 0),
				f(r.med(name, peer+"-cpu-ns/op"), 0), f(r.med(name, peer+"-allocs/op"), 3), f(r.med(name, peer+"-allowed/op"), 2)))
		}
		t.row(row...)
	}
	row := []string{"baseline (the loop, no limiter)"}
	for _, name := range wls {
		row = append(row, f(r.med(name, "baseline-ns/op"), 0))
	}
	t.row(row...)

	fmt.Fprintln(w, "\n### Bytes per tracked key at 1M keys")
	fmt.Fprintln(w)
	t.header("limiter", "B/key")
	for _, peer := range append([]string{"ratekey"}, keyedPeers...) {
		t.row(peer, f(r.med("MemoryPerKey/peer="+peer, "B/key"), 1))
	}

	fmt.Fprintln(w, "\n### Client IP: ns/op (allocs/op)")
	fmt.Fprintln(w)
	ipc := []string{"ratekey", "ratekey-mw", "ratekey-ClientAddress", "chi", "realclientip"}
	t.header(append([]string{"workload"}, ipc...)...)
	for _, pf := range []string{"3", "2000"} {
		for _, hops := range []string{"1", "3", "10"} {
			name := "ClientIP/prefixes=" + pf + "/hops=" + hops
			row := []string{pf + " prefixes, " + hops + " hops"}
			for _, c := range ipc {
				row = append(row, fmt.Sprintf("%s (%s)", ns(r.med(name, c+"-ns/op")), f(r.med(name, c+"-allocs/op"), 0)))
			}
			t.row(row...)
		}
	}

	fmt.Fprintln(w, "\n### Whole chain")
	fmt.Fprintln(w)
	t.header("benchmark", "contender", "wall/request", "CPU/request", "allocs/request")
	contenders := []struct{ name, label string }{
		{"ratekey", "front door (ratekey.New)"},
		{"hand", "composed by hand"},
		{"ratekey-anon", "front door, anonymous"},
		{"chi", "bare chi"},
		{"peer", "peer stack (chi ClientIPFromXFF + jwtauth + httprate)"},
		{"peer-anon", "peer stack, anonymous (ClientIPFromXFF + httprate per network)"},
	}
	for _, c := range contenders {
		t.row("in process (httptest, parallel)", c.label, ns(r.med("Chain", c.name+"-ns/op")), ns(r.med("Chain", c.name+"-cpu-ns/op")), f(r.med("Chain", c.name+"-allocs/op"), 1))
	}
	for _, c := range contenders {
		if strings.HasSuffix(c.name, "-anon") {
			continue
		}
		t.row("loopback HTTP (16 conns)", c.label, fmt.Sprintf("%s (%s req/s)", ns(r.med("Loopback", c.name+"-ns/op")), f(r.med("Loopback", c.name+"-req/s"), 0)),
			ns(r.med("Loopback", c.name+"-cpu-ns/op"))+" (server + load generator)", f(r.med("Loopback", c.name+"-allocs/op"), 1))
	}

	fmt.Fprintln(w, "\n### Loopback HTTP, stage by stage (the chain composed by hand): throughput over bare chi (not a target)")
	fmt.Fprintln(w)
	t.header("chain cut after", "throughput / bare chi")
	for _, st := range []struct{ name, label string }{
		{"address", "ClientAddress"},
		{"auth", "ClientAddress → Authenticate"},
		{"ratekey", "ClientAddress → Authenticate → RateLimiter (the whole chain)"},
	} {
		t.row(st.label, f(median(r.each("LoopbackStages", func(m run) float64 { return get(m, st.name+"/chi") })), 3)+"×")
	}

	fmt.Fprintln(w, "\n### JWT Authenticate: ns/op (allocs/op)")
	fmt.Fprintln(w)
	t.header("alg", "repeated (cache hit)", "nocache (same token)", "fresh token (miss)")
	for _, alg := range []string{"ES256", "RS256"} {
		name := "JWT/alg=" + alg
		row := []string{alg}
		for _, c := range []string{"repeated", "nocache", "fresh"} {
			row = append(row, fmt.Sprintf("%s (%s)", ns(r.med(name, c+"-ns/op")), f(r.med(name, c+"-allocs/op"), 0)))
		}
		t.row(row...)
	}

	fmt.Fprintln(w, "\n### Redis: decisions/s")
	fmt.Fprintln(w)
	t.header("workload", "ratekey", "redis_rate")
	for _, p := range []string{"1", "3"} {
		for _, c := range []string{"1", "16"} {
			name := "PeersInterleaved/policies=" + p + "/clients=" + c
			t.row(p+" policies, "+c+" clients", f(r.med(name, "ratekey-decisions/s"), 0), f(r.med(name, "redis_rate-decisions/s"), 0))
		}
	}
	runs := 0
	for _, v := range r {
		runs = max(runs, len(v))
	}
	fmt.Fprintf(w, "\n(%d benchmarks, up to %d runs each.)\n", len(r), runs)
}

// settleRows adds the targets of issue 27 (reserve, then settle), from
// BenchmarkSettleMemory and BenchmarkSettleRedis: a settling request's
// cost over a fixed-cost one in the same run (median of per-run
// differences; the worst of settling at, below and above the
// reservation), at the memory store (the verdict: "Memory: a settle
// allocates nothing, costs at most 150 ns more") and through the HTTP
// middleware (shown); Redis script calls per request and decisions/s at
// 64 callers against the fixed-cost ones.
func settleRows(r results, t *table, count func(string) string) {
	cases := []string{"settle=equal", "settle=refund", "settle=debt"}
	over := func(name, unit string) (worst float64, parts []string) {
		worst = math.NaN()
		for _, c := range cases {
			d := median(r.each(name, func(m run) float64 { return get(m, c+unit) - get(m, "fixed"+unit) }))
			if math.IsNaN(worst) || d > worst {
				worst = d
			}
			parts = append(parts, strings.TrimPrefix(c, "settle=")+" "+f(d, 0))
		}
		return worst, parts
	}
	st := "SettleMemory/layer=store"
	sns, sparts := over(st, "-ns/op")
	sal, _ := over(st, "-allocs/op")
	t.row("settling request over a fixed-cost one (memory store)", "Take + Settle vs Take, 1024 buckets, 1 goroutine",
		fmt.Sprintf("+%s ns (%s); %s allocs more; fixed %s", f(sns, 0), strings.Join(sparts, ", "), f(sal, 4), ns(r.med(st, "fixed-ns/op"))),
		"≤ 150 ns, 0 allocs", count(verdict(sns <= 150 && sal < zeroAllocs, sns)))
	mw := "SettleMemory/layer=middleware"
	dns, parts := over(mw, "-ns/op")
	dcpu, _ := over(mw, "-cpu-ns/op")
	dal, _ := over(mw, "-allocs/op")
	v := verdict(dns <= 150 && dal < zeroAllocs, dns)
	if v != "not run" {
		v = "(" + v + ")"
	}
	t.row("settling HTTP request over a fixed-cost one (memory; shown: the target is the store's)", "ClientAddress + RateLimiter + ReportCost, 1024 networks",
		fmt.Sprintf("+%s ns/request (%s; CPU +%s); %s allocs more; fixed %s", f(dns, 0), strings.Join(parts, ", "), f(dcpu, 0), f(dal, 3), ns(r.med(mw, "fixed-ns/op"))),
		"≤ 150 ns, 0 allocs", v)
	rd := "SettleRedis"
	eq := median(r.each(rd, func(m run) float64 { return get(m, "settle=equal-redis-calls/op") - get(m, "fixed-redis-calls/op") }))
	ch := median(r.each(rd, func(m run) float64 { return get(m, "settle=refund-redis-calls/op") - get(m, "fixed-redis-calls/op") }))
	t.row("Redis script calls a settle adds", "one server, 64 callers: cost equal / different",
		fmt.Sprintf("+%s / +%s calls/request", f(eq, 3), f(ch, 3)), "0 / ≤ 1", count(verdict(eq <= 0.001 && ch <= 1.001, ch)))
	for _, c := range []string{"settle=equal", "settle=refund"} {
		ratio := median(r.each(rd, func(m run) float64 { return get(m, "fixed-ns/op") / get(m, c+"-ns/op") }))
		cpu := median(r.each(rd, func(m run) float64 { return get(m, "fixed-cpu-ns/op") / get(m, c+"-cpu-ns/op") }))
		t.row("Redis decisions/s, settling vs fixed cost", "one server, 64 callers, cost "+map[bool]string{true: "equal to", false: "below"}[c == "settle=equal"]+" the reservation",
			fmt.Sprintf("%s× (by CPU time %s×); fixed %s/decision", f(ratio, 2), f(cpu, 2), ns(r.med(rd, "fixed-ns/op"))), "≥ 0.8×", count(verdict(ratio >= 0.8, ratio)))
	}
}

// grpcRows adds the gRPC target (issue 28): grpclimit's interceptor over
// a bare gRPC server, against the front door over bare chi in the same
// run (BenchmarkGRPCLoopback), as throughput ratios.
func grpcRows(r results, t *table, count func(string) string) {
	gs := r.each("GRPCLoopback", func(m run) float64 { return get(m, "grpc-ratio") })
	hs := r.each("GRPCLoopback", func(m run) float64 { return get(m, "http-ratio") })
	g, h := median(gs), median(hs)
	t.row("gRPC unary call through grpclimit, loopback (16 conns)", "throughput vs a bare grpc.Server, against the front door's vs bare chi (same run)",
		fmt.Sprintf("%s× (runs %s) against %s× (runs %s)", f(g, 3), span(gs, 2), f(h, 3), span(hs, 2)),
		"≥ the HTTP ratio", count(verdict(g >= h, g-h)))
}
