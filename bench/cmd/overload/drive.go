package main

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Classes of a request, as the stack sorts them.
const (
	sheddable = 0
	critical  = 1
)

// send sends one request of the class and returns its HTTP status (0 for
// a transport error).
type send func(ctx context.Context, class int) int

// second is what one second of a run saw, by the second its requests were
// due in: offered, served (200) and refused (503, 429) per class, others,
// and the latencies of the served ones (from the instant each was due, so
// a driver that falls behind does not hide queueing: no coordinated
// omission).
type second struct {
	offered, served, refused [2]int
	other                    int
	latencies                []time.Duration
}

// run is an open-loop run: requests due at a fixed rate, each on its own
// goroutine, whatever became of the earlier ones.
type run struct {
	mu      sync.Mutex
	seconds []second
	start   time.Time
}

// drive sends rate requests a second for d, a share critical of them
// critical (every 1/critical-th, spread evenly), and returns the run. At
// most maxOutstanding requests are in flight at once; the ones beyond are
// counted as other (the driver's own bound, so a target that queues
// without end cannot take the machine down).
func drive(do send, rate float64, d time.Duration, criticalShare float64, maxOutstanding int) *run {
	r := &run{seconds: make([]second, int(d/time.Second)+1), start: time.Now()}
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxOutstanding)
	total := int(rate * d.Seconds())
	acc := 0.0
	for i := 0; i < total; i++ {
		due := r.start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		for time.Until(due) > 0 {
			// At thousands a second, launch in batches a millisecond
			// apart: a sleep per request would oversleep each time.
			time.Sleep(min(time.Until(due), time.Millisecond))
		}
		class := sheddable
		if acc += criticalShare; acc >= 1 {
			acc--
			class = critical
		}
		sec := int(due.Sub(r.start) / time.Second)
		select {
		case sem <- struct{}{}:
		default:
			r.add(sec, class, -1, 0)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			status := do(context.Background(), class)
			r.add(sec, class, status, time.Since(due))
		})
	}
	wg.Wait()
	return r
}

// add records a request due in second sec.
func (r *run) add(sec, class, status int, lat time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.seconds[sec]
	s.offered[class]++
	switch status {
	case 200:
		s.served[class]++
		s.latencies = append(s.latencies, lat)
	case 503, 429:
		s.refused[class]++
	default:
		s.other++
	}
}

// window sums the seconds [from, to) of the run.
func (r *run) window(from, to int) second {
	var w second
	for i := from; i < to && i < len(r.seconds); i++ {
		s := &r.seconds[i]
		for c := range 2 {
			w.offered[c] += s.offered[c]
			w.served[c] += s.served[c]
			w.refused[c] += s.refused[c]
		}
		w.other += s.other
		w.latencies = append(w.latencies, s.latencies...)
	}
	return w
}

// quantile returns the q-quantile of the latencies (0 when there are none).
func (s *second) quantile(q float64) time.Duration {
	if len(s.latencies) == 0 {
		return 0
	}
	l := slices.Clone(s.latencies)
	slices.Sort(l)
	return l[min(int(q*float64(len(l))), len(l)-1)]
}

// goodput returns the served requests a second over n seconds.
func (s *second) goodput(n int) float64 {
	return float64(s.served[0]+s.served[1]) / float64(n)
}
