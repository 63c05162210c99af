package bench

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
)

// BenchmarkKeyed compares in-memory keyed limiters on identical inputs in
// one run: 100k and 1M distinct account keys (tracked beforehand by one
// decision each, so the run measures the steady state), drawn with a Zipf
// skew (s = 1.1) by GOMAXPROCS goroutines, 1% of decisions naming a key
// never seen before (churn), with 1 policy (account) or 3 (account, one of
// 100 tenants, one shared operation key) per request. Limits: account 100/s
// burst 50, tenant 10 000/s burst 1 000, operation 1M/s burst 100 000; see
// keyed_peers_test.go for how each peer is configured.
//
// The account indexes are drawn before timing (indexStreams) and are the
// same arrays for every limiter; "baseline" is the same loop without a
// limiter (read the index and the key strings' headers), for scale.
//
// b.N is the number of decisions each limiter makes; they take turns in
// slices ([interleave]), with the garbage collector off during slices
// (collected between rounds), so the limiters that allocate are not charged
// for collecting their garbage and none pays for another's. Metrics per
// limiter: <name>-ns/op (wall time per decision over all goroutines, as
// RunParallel reports), <name>-allocs/op, <name>-allowed/op; and
// ratekey/fastest, ratekey's ns/op over the fastest peer's.
//
// Run it with a fixed -benchtime (e.g. 2000000x): each call of the function
// builds and fills every limiter again, which takes seconds at 1M keys.
func BenchmarkKeyed(b *testing.B) {
	keys := allKeys()
	tenants := tenantKeys()
	for _, w := range []struct {
		name string
		n    int
	}{{"100k", 100_000}, {"1M", 1_000_000}} {
		for _, policies := range []int{1, 3} {
			b.Run(fmt.Sprintf("keys=%s/policies=%d", w.name, policies), func(b *testing.B) {
				procs := runtime.GOMAXPROCS(0)
				idx := indexStreams(w.n, b.N/procs+1)
				cs := make([]contender, 0, len(keyedPeers)+1)
				allowed := make([]atomic.Int64, len(keyedPeers))
				lims := make([]keyedLimiter, len(keyedPeers))
				for i, p := range keyedPeers {
					l := p.new()
					lims[i] = l
					fill := l.worker(1)
					for _, k := range keys[:w.n] {
						fill(k, "")
					}
					workers := make([]func(string, string) bool, procs)
					pos := make([]int, procs)
					for g := range workers {
						workers[g] = l.worker(policies)
					}
					cs = append(cs, contender{name: p.name, run: func(n int) {
						parallel(n, procs, func(g, n int) {
							decide, s, j := workers[g], idx[g], pos[g]
							ok := int64(0)
							for range n {
								a := s[j%len(s)]
								if decide(keys[a], tenants[a%tenantsN]) {
									ok++
								}
								j++
							}
							pos[g] = j
							allowed[i].Add(ok)
						})
					}})
				}
				// The loop without a limiter: reading the next index and
				// the key strings' headers, for scale.
				pos := make([]int, procs)
				sink := make([]int, procs)
				cs = append(cs, contender{name: "baseline", run: func(n int) {
					parallel(n, procs, func(g, n int) {
						s, j, x := idx[g], pos[g], 0
						for range n {
							a := s[j%len(s)]
							x += len(keys[a]) + len(tenants[a%tenantsN])
							j++
						}
						pos[g], sink[g] = j, x
					})
				}})
				defer func() {
					for _, l := range lims {
						l.close()
					}
				}()
				res := interleave(b, cs, interleaveOptions{gcOff: true})
				fastest := math.Inf(1)
				for i := range lims {
					b.ReportMetric(float64(allowed[i].Load())/float64(res[i].ops), cs[i].name+"-allowed/op")
					if i > 0 {
						fastest = min(fastest, res[i].nsOp)
					}
				}
				b.ReportMetric(res[0].nsOp/fastest, "ratekey/fastest")
			})
		}
	}
}
