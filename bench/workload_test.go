package bench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
)

// The keyed workloads: N distinct account keys drawn with a Zipf skew (a
// few hot accounts, a long tail) plus churn, one fresh key per churnEvery
// decisions, taken from a pool of keys no decision has used before (the
// pool wraps around after freshPool keys, by which time their buckets are
// full again). Key strings are shaped like ratekey's encoded identity keys
// and are the same strings for every limiter.
const (
	churnEvery = 100     // 1% of decisions name a key never seen before
	freshPool  = 1 << 18 // 262 144 fresh keys after the N base keys
	tenantsN   = 100
	opKey      = "per-operation|operation=GET /v1/reports/{id}"
	zipfS      = 1.1
)

// allKeys holds 1M base keys and the fresh pool: the 100k workload uses
// the first 100k as its base keys, and both take fresh keys from
// [1M, 1M+freshPool).
var allKeys = sync.OnceValue(func() []string {
	const n = 1_000_000 + freshPool
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("per-account|tenant=t%03d|account=user-%07d", i%tenantsN, i)
	}
	return k
})

var tenantKeys = sync.OnceValue(func() []string {
	k := make([]string, tenantsN)
	for i := range k {
		k[i] = fmt.Sprintf("per-tenant|tenant=t%03d", i)
	}
	return k
})

// stream is one goroutine's deterministic sequence of account indexes.
type stream struct {
	g, procs int
	z        *rand.Zipf
	r        *rand.Rand
	fresh    int
	base     int
}

func newStreams(base int) []*stream {
	procs := runtime.GOMAXPROCS(0)
	s := make([]*stream, procs)
	for g := range s {
		r := rand.New(rand.NewPCG(uint64(g)+1, 0x5eed))
		s[g] = &stream{g: g, procs: procs, r: r, base: base,
			z: rand.NewZipf(rand.New(rand.NewPCG(uint64(g)+1, 7919)), zipfS, 1, uint64(base-1))}
	}
	return s
}

// next returns the index in allKeys of the next account key.
func (s *stream) next() int {
	if s.r.Uint64N(churnEvery) == 0 {
		i := (s.fresh*s.procs + s.g) % freshPool
		s.fresh++
		return 1_000_000 + i
	}
	return int(s.z.Uint64())
}

// indexStreams draws, for each of GOMAXPROCS goroutines, perG account
// indexes from its stream, before any timing: the timed loops only read
// them (no Zipf sampling inside a measurement), and every limiter reads
// the same arrays, so each sees exactly the same keys in the same order.
func indexStreams(base, perG int) [][]int32 {
	streams := newStreams(base)
	out := make([][]int32, len(streams))
	for g, s := range streams {
		out[g] = make([]int32, perG)
		for i := range out[g] {
			out[g][i] = int32(s.next())
		}
	}
	return out
}

// parallel runs n operations over procs goroutines, goroutine g doing its
// share (n/procs, one more for the first n%procs) with work(g, share).
func parallel(n, procs int, work func(g, n int)) {
	var wg sync.WaitGroup
	for g := range procs {
		share := n / procs
		if g < n%procs {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(g, share)
		}()
	}
	wg.Wait()
}
