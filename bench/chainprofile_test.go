package bench

import (
	"net/http"
	"sync/atomic"
	"testing"
)

// BenchmarkChainProfile serves BenchmarkChain's workload with one handler
// per sub-benchmark (the front door with and without a token, and bare
// chi), not interleaved and without the peers, so that a CPU profile
// (-cpuprofile) shows only that handler's request path. cpu-ns/op is the
// process's CPU time per request (getrusage), steadier than ns/op on a
// machine shared with other work. Not a target: read BenchmarkChain for
// figures.
func BenchmarkChainProfile(b *testing.B) {
	k := newJWTKey(b, "ES256")
	in := chainInputs(b, k)
	for _, c := range []struct {
		name string
		h    http.Handler
		auth bool
	}{
		{"ratekey", newFrontDoor(b, k, false), true},
		{"ratekey-anon", newFrontDoor(b, k, true), false},
		{"chi", newBareRouter(), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			var bad atomic.Int64
			run := serveParallel(c.h, chainRequests(in, c.auth), &bad)
			run(len(in)) // warm-up: every token verified and cached, every key tracked
			b.ReportAllocs()
			b.ResetTimer()
			c0 := cpuTime()
			run(b.N)
			cpu := cpuTime() - c0
			b.StopTimer()
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			if n := bad.Load(); n > 0 {
				b.Fatalf("%d answers were not 200", n)
			}
		})
	}
}
