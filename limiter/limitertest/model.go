package limitertest

import (
	"time"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// bucketID names a bucket as the contract does: key and limit shape.
type bucketID struct {
	key      string
	interval time.Duration
	burst    int64
}

func idOf(r *limiter.Request) bucketID {
	if r.Limit.MaxInFlight != 0 {
		return bucketID{key: r.Key} // an in-flight counter: the key alone
	}
	return bucketID{r.Key, r.Limit.Rate.Interval(), r.Limit.Burst}
}

// model is the reference: the [limiter.Limiter] contract written as
// plainly as possible on top of [gcra.Decide], with unbounded maps and
// no concurrency.
type model struct {
	tats map[bucketID]int64
}

func newModel() *model { return &model{tats: map[bucketID]int64{}} }

// release frees r.Cost slots of r's in-flight counter.
func (m *model) release(r *limiter.Request) {
	id := idOf(r)
	if n := gcra.Held(m.tats[id]) - r.Cost; n > 0 {
		m.tats[id] = gcra.InFlightBase + n
	} else {
		delete(m.tats, id)
	}
}

// call decides reqs at now as Take (charge) or Peek would. Decisions of
// in-flight requests it charges get Slot 1, those of settling requests it
// charges their Reservation: the TAT their charge left.
func (m *model) call(reqs []limiter.Request, now int64, charge bool) []limiter.Decision {
	out := make([]limiter.Decision, len(reqs))
	after := make([]int64, len(reqs)) // the TAT each request leaves, if charged
	pass := func(in func(i int) bool) (bool, map[bucketID]int64) {
		work := map[bucketID]int64{}
		all := true
		for i := range reqs {
			if !in(i) {
				continue
			}
			id := idOf(&reqs[i])
			tat, ok := work[id]
			if !ok {
				if tat, ok = m.tats[id]; !ok {
					tat = now // an unknown bucket is full
				}
			}
			d, next := gcra.DecideAny(tat, now, &reqs[i].Limit, reqs[i].Cost, 1)
			out[i] = d
			work[id], after[i] = next, next
			all = all && d.Allowed
		}
		return all, work
	}
	all, work := pass(func(int) bool { return true })
	anyDry := false
	for i := range reqs {
		anyDry = anyDry || reqs[i].DryRun
	}
	second := !all && anyDry // the enforcing requests alone are charged
	if second {
		all, work = pass(func(i int) bool { return !reqs[i].DryRun })
	}
	if all && charge {
		for id, tat := range work {
			m.tats[id] = tat
		}
		for i := range reqs {
			switch {
			case second && reqs[i].DryRun:
			case reqs[i].Limit.MaxInFlight != 0:
				out[i].Slot = 1
			case reqs[i].Settle:
				out[i].Reservation = after[i]
			}
		}
	}
	return out
}

// settle settles reqs[i] at actual[i] as Settle would at now, for every
// ds[i] (the model's own Decisions) with a Reservation: gcra.Settle on the
// bucket's TAT (a full one when untracked).
func (m *model) settle(reqs []limiter.Request, ds []limiter.Decision, actual []int64, now int64) {
	deltas := make([]int64, len(reqs))
	if err := gcra.ValidateSettle(reqs, ds, actual, 1, deltas); err != nil {
		panic(err) // the suite settles valid requests only
	}
	for i, delta := range deltas {
		if delta == 0 {
			continue
		}
		id := idOf(&reqs[i])
		tat, ok := m.tats[id]
		if !ok {
			tat = now
		}
		if next, changed := gcra.Settle(tat, now, ds[i].Reservation, delta); changed {
			m.tats[id] = next
		}
	}
}
