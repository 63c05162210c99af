package bench

import (
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"
	"time"
)

// contender is one side of an interleaved comparison: run performs n
// operations (over as many goroutines as it likes) and returns when they
// are done. Every contender of a comparison works on identical inputs.
type contender struct {
	name string
	run  func(n int)
}

// result is what interleave measured for one contender.
type result struct {
	ns     time.Duration // wall time over all its slices
	cpu    time.Duration // process CPU time (user + system) over its slices
	mall   uint64        // heap allocations over all its slices
	ops    int
	nsOp   float64
	cpuOp  float64
	allocs float64
}

// cpuTime returns the CPU time (user + system) the process has used so
// far, or 0 where getrusage fails.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// interleaveOptions tunes [interleave].
type interleaveOptions struct {
	// rounds is how many slices each contender's b.N operations are cut
	// into (at least one operation per slice); 0 means 10.
	rounds int
	// gcOff disables the garbage collector while slices run and collects
	// between rounds, outside the timed regions. Use it when contenders
	// share one process heap of very different sizes and allocation rates:
	// with the collector on, a cycle triggered by one contender's
	// allocations marks every contender's heap and runs during whoever's
	// slice comes next. With it off, no contender pays for garbage
	// collection at all, which favours the contenders that allocate.
	gcOff bool
}

// interleave runs b.N operations of every contender in rounds: in each
// round every contender runs one slice, and the contender that goes first
// rotates from round to round, so that all of them see the same background
// load on a shared, noisy machine. It reports, per contender, "<name>-ns/op"
// (wall time per operation), "<name>-cpu-ns/op" (the process's CPU time per
// operation, from getrusage: it does not grow while the process waits for
// a core other processes hold, so it is the steadier reading on a loaded
// machine; with work spread over P goroutines it is about P times the wall
// time on an idle machine) and "<name>-allocs/op" (heap allocations from
// runtime.MemStats.Mallocs deltas around its slices, so any goroutine's
// allocations during the slice count), and returns the results in
// contender order.
func interleave(b *testing.B, cs []contender, o interleaveOptions) []result {
	b.Helper()
	rounds := o.rounds
	if rounds <= 0 {
		rounds = 10
	}
	rounds = min(rounds, b.N)
	res := make([]result, len(cs))
	if o.gcOff {
		old := debug.SetGCPercent(-1)
		defer debug.SetGCPercent(old)
	}
	runtime.GC()
	var ms runtime.MemStats
	b.ResetTimer()
	done := 0
	for r := range rounds {
		n := (b.N - done) / (rounds - r)
		for k := range cs {
			i := (k + r) % len(cs)
			runtime.ReadMemStats(&ms)
			m0 := ms.Mallocs
			c0 := cpuTime()
			t0 := time.Now()
			cs[i].run(n)
			res[i].ns += time.Since(t0)
			res[i].cpu += cpuTime() - c0
			runtime.ReadMemStats(&ms)
			res[i].mall += ms.Mallocs - m0
			res[i].ops += n
		}
		done += n
		if o.gcOff {
			b.StopTimer()
			runtime.GC()
			b.StartTimer()
		}
	}
	b.StopTimer()
	for i := range res {
		res[i].nsOp = float64(res[i].ns.Nanoseconds()) / float64(res[i].ops)
		res[i].cpuOp = float64(res[i].cpu.Nanoseconds()) / float64(res[i].ops)
		res[i].allocs = float64(res[i].mall) / float64(res[i].ops)
		b.ReportMetric(res[i].nsOp, cs[i].name+"-ns/op")
		b.ReportMetric(res[i].cpuOp, cs[i].name+"-cpu-ns/op")
		b.ReportMetric(res[i].allocs, cs[i].name+"-allocs/op")
	}
	return res
}
