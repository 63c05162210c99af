package engine

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
)

// The local fallback (OnStoreErrorLocal): while the store cannot decide, a
// policy may decide on [Config].Fallback, a store of this process
// (a memory store whose Replicas is the number of processes, so that the
// fleet together stays within the limit). A store error marks the store
// down: for ProbeInterval (1 s) no call asks it, but for one probe per
// interval, so no request waits on a store known to be down for more than
// one timeout per interval; the first answer of the store (a probe's, or
// any call's) marks it up again, so a slow store is not a permanent
// fallback: the process returns within one interval of the store
// answering in time again. The state is the store's (see breakers),
// shared by every RateLimiter with a Fallback on it; a RateLimiter
// without one asks the store at every call, as before.

// ProbeInterval is how long a RateLimiter with a Fallback leaves its store
// unasked after a store error, but for one probe call per interval.
const ProbeInterval = time.Second

// errStoreDown is the error of a policy whose store was not asked: it
// failed within the last ProbeInterval and this call is not the probe.
var errStoreDown = errors.New("middleware: the store failed within the last probe interval; it is asked again once per interval (1s)")

// breakers holds the breaker of each store (a pointer) that has a
// Fallback, so that every RateLimiter on it shares its down state: a
// reload, which builds a new RateLimiter (the demo does), does not forget
// that the store is down. An entry lives as long as the process.
var breakers sync.Map // limiter.Limiter (a pointer) -> *breaker

// breakerOf returns store l's breaker: shared when l is a pointer (every
// store of this module is), else one of its own.
func breakerOf(l limiter.Limiter) *breaker {
	if l == nil || reflect.ValueOf(l).Kind() != reflect.Pointer {
		return &breaker{}
	}
	b, _ := breakers.LoadOrStore(l, &breaker{})
	return b.(*breaker)
}

// breaker is a store's up/down state while it has a Fallback:
// up, or down since a failure with the next probe due at probeAt. The
// zero value (and a nil *breaker) is up. Safe for concurrent use.
type breaker struct {
	down    atomic.Bool
	probeAt atomic.Int64 // Unix ns of the next probe while down
}

// ask reports whether a call may ask the store: while it is up, always;
// while it is down, one call per ProbeInterval (the probe: probe true). A
// nil breaker always asks.
func (b *breaker) ask() (ask, probe bool) {
	if b == nil || !b.down.Load() {
		return true, false
	}
	now := time.Now().UnixNano()
	at := b.probeAt.Load()
	ok := now >= at && b.probeAt.CompareAndSwap(at, now+int64(ProbeInterval))
	return ok, ok
}

// recordStore notes, on st's breaker, the outcome of a call that asked the store (err nil: it
// answered; probe: the call was the interval's probe), logging the
// transitions and, at each failed probe (once per interval while the store
// stays down), that the local policies run on the fallback.
func (st *State[R]) recordStore(err error, probe bool) {
	b := st.breaker
	if b == nil || errors.Is(err, limiter.ErrInvalidRequest) {
		return // a request the store refuses to decide says nothing of the store
	}
	if err == nil {
		if b.down.CompareAndSwap(true, false) {
			st.Logger.LogAttrs(context.Background(), slog.LevelInfo, "ratekey store answers again: every policy decides on it",
				slog.String("store", st.store))
		}
		return
	}
	b.probeAt.Store(time.Now().Add(ProbeInterval).UnixNano())
	if b.down.Swap(true) && !probe {
		return // another call's failure logged it
	}
	st.Logger.LogAttrs(context.Background(), slog.LevelWarn, "ratekey store cannot decide: policies with on_store_error local decide on the local fallback",
		slog.String("store", st.store), slog.String("fallback", st.fallbackStore), slog.String("policies", strings.Join(st.localPolicies, ",")),
		slog.String("error", err.Error()), slog.Float64("probe_interval_seconds", ProbeInterval.Seconds()))
}

// decideFallback decides, after the store failed with err, the policies
// ev.Policies[idx[j]] whose OnStoreError is local on the Fallback store
// (marked Fallback; their Limit is the Fallback's share), and gives the
// others ERROR with err. All-or-nothing still holds: when another policy
// fails closed, the request is refused anyway, so the fallback is asked
// with Peek and nothing is charged.
func (st *State[R]) decideFallback(ctx context.Context, sc *Scratch, ev *decide.Evaluation, idx []int, reqs []limiter.Request, charge bool, err error) {
	var lidx []int
	var lreqs []limiter.Request
	for j, i := range idx {
		res := &ev.Policies[i]
		if res.OnStoreError != policy.OnStoreErrorLocal {
			res.Decision, res.Err = decide.DecisionError, err
			if refuses(res) {
				charge = false
			}
			continue
		}
		lidx = append(lidx, i)
		lreqs = append(lreqs, reqs[j])
	}
	if len(lreqs) == 0 {
		return
	}
	decs, ferr := st.call(ctx, st.Fallback, st.fallbackStore, nil, lreqs, charge)
	ev.Replicas = int(st.fallbackReplicas) // the processes sharing the budgets that decided
	for k, i := range lidx {
		res := &ev.Policies[i]
		res.Fallback, res.Store = true, st.fallbackStore
		res.Limit = st.fallbackShare(lreqs[k].Limit) // the limit it states: this process's share
	}
	st.fill(sc, ev, lidx, lreqs, decs, ferr, charge, st.Fallback)
	if st.Metrics != nil && ferr == nil {
		for _, i := range lidx {
			st.Metrics.Fallback(ev.Policies[i].Policy)
		}
	}
}

// fallbackShare returns this process's share of l on the Fallback store.
func (st *State[R]) fallbackShare(l limiter.Limit) limiter.Limit {
	s, err := l.Share(st.fallbackReplicas)
	if err != nil {
		return l
	}
	return s
}
