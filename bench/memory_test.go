package bench

import (
	"runtime"
	"testing"
	"time"
)

// memoryLimit is the limit of the memory benchmark: 10 per hour, burst 10,
// so that no state expires, no window rolls over and no sweep runs while
// the keys are inserted (a window-based peer would otherwise drop states
// and look smaller than it is).
var memoryLimit = rateBurst{Rate: 10, Burst: 10, Per: time.Hour}

// BenchmarkMemoryPerKey reports the heap bytes per tracked key ("B/key")
// of every in-memory limiter with 1M keys: runtime.MemStats.HeapAlloc after
// a GC, before building the limiter and after one decision on each of the
// 1M keys (45-byte strings, the same strings for all, allocated beforehand
// and kept alive by the benchmark: a limiter that keeps a reference to the
// caller's string pays nothing for it, one that copies it or builds a new
// one pays for its copy). One decision of cost 1 per key, a limit of 10 per
// hour (burst 10). ratekey's store runs with MaxKeys 1M (its default).
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 1_000_000
	keys := allKeys()[:n]
	saved := accountLimit
	accountLimit = memoryLimit
	defer func() { accountLimit = saved }()
	for _, p := range keyedPeers {
		b.Run("peer="+p.name, func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				l := p.new()
				decide := l.worker(1)
				for _, k := range keys {
					decide(k, "")
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/n, "B/key")
				runtime.KeepAlive(decide)
				runtime.KeepAlive(l)
				l.close()
			}
		})
	}
}
