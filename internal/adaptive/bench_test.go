package adaptive

import (
	"runtime"
	"testing"
)

// BenchmarkAcquireRelease is the issue 29 target: an Acquire and a
// Release of an adaptive cap (with the two clock readings that time the
// request, and its sample), contended by 64 goroutines (RunParallel with
// 32 per GOMAXPROCS on 2 cores; -cpu sets GOMAXPROCS), at most 200 ns and
// no allocation. The limit is the ceiling, so every acquire succeeds and
// every request is decided on the sample as the middleware does (timed only when
// sampled): windows close as they do under load. ns/op is wall time per
// operation over every goroutine (RunParallel's convention: with 2 busy
// cores, half the CPU cost); cpu-ns/op is the process's CPU time per
// operation (getrusage), the steadier reading on a shared machine.
func BenchmarkAcquireRelease(b *testing.B) {
	c := New()
	s := &Settings{Min: 1 << 19, Ceiling: 1 << 19, Reserve: 200}
	b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		critical := false
		for pb.Next() {
			critical = !critical
			if ok, _, _ := c.Acquire(s, critical); !ok {
				b.Fatal("refused below the limit")
			}
			var start int64
			sample := c.Sample()
			if sample {
				start = c.Now()
			}
			var now int64
			if sample {
				now = c.Now()
			}
			c.Release(s, critical, sample, start, now)
		}
	})
	if used := cpuTime() - cpu; used > 0 {
		b.ReportMetric(float64(used)/float64(b.N), "cpu-ns/op")
	}
}
