package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// The process's side of in-flight caps (the store's side is capScript,
// releaseScript and renewScript): the slot ids a Limiter hands out, the
// leases it holds and renews, and the leases it cancels.
//
// A lease whose fate is unknown is cancelled: the leases of an acquire
// whose call failed after it may have reached Redis (a timeout: Redis
// stalled, or the reply was lost), and those of a release or a refund
// that failed. A stalled Redis runs the script of a timed-out acquire when
// it resumes, so such a lease would otherwise hold its slots for a whole
// lease with nothing running (issue 24). The renewer sends the cancels
// (releaseScript in cancel mode) until the store answers, 100 ms after a
// failure at first, doubling to at most a second: once the store answers,
// the queued cancels are delivered within about a second. A cancel removes
// the lease if it exists (giving its slots back); if it does not, it
// leaves a tombstone member for one lease, and an acquire that finds its
// own tombstone charges nothing, so a cancel that reaches Redis before the
// acquire it cancels (they travel on different connections) still wins. A
// cancel never frees another request's slot: it names only its own
// lease's member.

const (
	// maxCancels bounds the cancels a Limiter queues; more are dropped
	// (counted), and their leases, if they exist, expire within a lease.
	maxCancels = 1 << 16
	// cancelBatch bounds the cancels sent in one attempt.
	cancelBatch = 512
	// minCancelWait and maxCancelWait bound the wait between two attempts
	// to send cancels while the store does not answer.
	minCancelWait = 100 * time.Millisecond
	maxCancelWait = time.Second
)

// leases is a Limiter's in-flight state: its lease tag, the slot ids it
// hands out, the leases it holds and renews, and the leases it cancels.
type leases struct {
	once sync.Once
	tag  string        // 16 random hex digits: this Limiter's leases
	seq  atomic.Uint64 // the last slot id handed out

	mu       sync.Mutex
	held     map[uint64]*lease // by slot id
	cancels  []leaseRef        // leases to cancel, oldest first
	cancelAt time.Time         // next attempt to send cancels; zero: none queued
	backoff  time.Duration     // the wait after the last failed attempt
	running  bool              // the renewer goroutine runs
	wake     chan struct{}     // tells the renewer there is new work

	dropped atomic.Int64 // cancels not queued: the queue was full
}

// lease is one held lease, as the renewer knows it.
type lease struct {
	key, member string
	ms          int64         // the lease, ms
	every       time.Duration // renewal period: lease / 3
	due         time.Time     // next renewal
}

// leaseRef names one lease in the store.
type leaseRef struct {
	key, member string
	group       uint32 // the key's Cluster slot or Ring tag: one call per group
	cost        int64  // the slots it holds
	ms          int64  // its lease, ms: how long a cancel's tombstone lives
}

// leaseTag returns the Limiter's lease tag.
func (l *Limiter) leaseTag() string {
	s := &l.leases
	s.once.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		s.tag = hex.EncodeToString(b[:])
		s.held = map[uint64]*lease{}
		s.wake = make(chan struct{}, 1)
	})
	return s.tag
}

// member returns the sorted-set member of the lease of slot id for r.
func (l *Limiter) member(id uint64, r *limiter.Request) string {
	return l.leaseTag() + ":" + strconv.FormatUint(id, 10) + ":" + strconv.FormatInt(r.Cost, 10)
}

// refOf returns the lease of slot id for r, whose cap's key is name in
// group.
func (l *Limiter) refOf(name string, group uint32, id uint64, r *limiter.Request) leaseRef {
	return leaseRef{key: name, member: l.member(id, r), group: group, cost: r.Cost, ms: leaseOf(r).Milliseconds()}
}

// hold registers a lease for renewal, starting the renewer if none runs.
func (l *Limiter) hold(id uint64, key, member string, d time.Duration) {
	s := &l.leases
	ls := &lease{key: key, member: member, ms: d.Milliseconds(), every: d / 3}
	ls.due = time.Now().Add(ls.every)
	s.mu.Lock()
	s.held[id] = ls
	s.mu.Unlock()
	l.kick()
}

// unhold stops renewing the lease of slot id.
func (l *Limiter) unhold(id uint64) {
	l.leaseTag() // the maps exist
	s := &l.leases
	s.mu.Lock()
	delete(s.held, id)
	s.mu.Unlock()
}

// cancelLater queues refs for the renewer to cancel (see the top of this
// file); beyond maxCancels queued, the rest are dropped and counted.
func (l *Limiter) cancelLater(refs []leaseRef) {
	if len(refs) == 0 {
		return
	}
	l.leaseTag() // the maps exist
	s := &l.leases
	s.mu.Lock()
	if room := max(maxCancels-len(s.cancels), 0); len(refs) > room {
		s.dropped.Add(int64(len(refs) - room))
		refs = refs[:room]
	}
	s.cancels = append(s.cancels, refs...)
	if s.cancelAt.IsZero() {
		s.cancelAt = time.Now()
	}
	s.mu.Unlock()
	l.kick()
}

// mayHaveRun reports whether a call that failed with err may have reached the
// store: every error but a failed dial (go-redis dials before it writes a
// command, so nothing of the call left the process).
func mayHaveRun(err error) bool {
	var oe *net.OpError
	return !errors.As(err, &oe) || oe.Op != "dial"
}

// kick starts the renewer, or wakes it if it runs.
func (l *Limiter) kick() {
	s := &l.leases
	s.mu.Lock()
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		go l.renew()
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// renewers bounds the renewal calls a Limiter's renewer runs at once.
const renewers = 4

// renewal is the leases of one cap key (and lease length) renewed in one
// script call.
type renewal struct {
	key     string
	ms      int64
	members []any
	ids     []uint64
}

// renew is the renewer: one goroutine per Limiter while it holds leases
// or has cancels queued (it returns when it has neither, and starts again
// with the next). It renews every lease about lease/3 after its last
// renewal (up to a quarter of that early, to renew it with the others of
// its key): the leases due then are renewed in one script call per cap
// key (and lease length), at most renewers calls at a time, each under the
// Limiter's Timeout. A failed renewal is tried again a second later
// (renewal is idempotent), never past the lease's expiry: the renewer does
// not revive an expired lease. It sends the queued cancels as the top of
// this file says.
func (l *Limiter) renew() {
	s := &l.leases
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		s.mu.Lock()
		if len(s.held) == 0 && len(s.cancels) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		due := s.dueRenewals(now)
		cancels := s.dueCancels(now)
		s.mu.Unlock()
		l.sendRenewals(due)
		l.sendCancels(cancels)
		timer.Reset(time.Until(s.next()))
		select {
		case <-timer.C:
		case <-s.wake:
		}
	}
}

// dueRenewals returns the leases due for renewal at now, grouped by key
// and lease length, and moves their next renewal one period on. s.mu is
// held.
func (s *leases) dueRenewals(now time.Time) []*renewal {
	var due []*renewal
	for id, ls := range s.held {
		// Due, or due within a quarter of its period: renewed a little
		// early, with the others of its key.
		if ls.due.After(now.Add(ls.every / 4)) {
			continue
		}
		j := slices.IndexFunc(due, func(b *renewal) bool { return b.key == ls.key && b.ms == ls.ms })
		if j < 0 {
			due = append(due, &renewal{key: ls.key, ms: ls.ms})
			j = len(due) - 1
		}
		due[j].members = append(due[j].members, ls.member)
		due[j].ids = append(due[j].ids, id)
		ls.due = now.Add(ls.every)
	}
	return due
}

// dueCancels takes from the queue the cancels to send at now: up to
// cancelBatch, if an attempt is due. s.mu is held.
func (s *leases) dueCancels(now time.Time) []leaseRef {
	if s.cancelAt.IsZero() || s.cancelAt.After(now) {
		return nil
	}
	n := min(len(s.cancels), cancelBatch)
	refs := slices.Clone(s.cancels[:n])
	s.cancels = slices.Delete(s.cancels, 0, n)
	return refs
}

// next returns when the renewer has work next: the earliest renewal or
// attempt to cancel, or now if it has nothing left (it then returns).
func (s *leases) next() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if len(s.held) == 0 && len(s.cancels) == 0 {
		return now
	}
	next := now.Add(time.Hour)
	if !s.cancelAt.IsZero() {
		next = s.cancelAt
	}
	for _, ls := range s.held {
		if ls.due.Before(next) {
			next = ls.due
		}
	}
	return next
}

// sendRenewals renews due, at most renewers calls at a time; the leases
// of a call that failed are due again a second later (or one period, if
// shorter).
func (l *Limiter) sendRenewals(due []*renewal) {
	var failed []*renewal
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, renewers)
	for _, b := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
			defer cancel()
			args := append([]any{nil, nil, int64(1), b.key, b.ms}, b.members...)
			if _, err := run(ctx, l.client, &renewS, args, true); err != nil {
				mu.Lock()
				failed = append(failed, b)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	s := &l.leases
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range failed {
		for _, id := range b.ids {
			if ls := s.held[id]; ls != nil {
				ls.due = time.Now().Add(min(time.Second, ls.every))
			}
		}
	}
}

// sendCancels sends refs (releaseScript in cancel mode) and schedules the
// next attempt: at once if more are queued and this one was answered; if
// it failed, the failed ones go back to the head of the queue, to be sent
// after the backoff (doubled, between minCancelWait and maxCancelWait).
func (l *Limiter) sendCancels(refs []leaseRef) {
	if len(refs) == 0 {
		return
	}
	failed, _ := l.releaseRefs(context.Background(), refs, true)
	s := &l.leases
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if len(failed) > 0 {
		s.cancels = append(failed, s.cancels...)
		s.backoff = min(max(2*s.backoff, minCancelWait), maxCancelWait)
		s.cancelAt = now.Add(s.backoff)
		return
	}
	s.backoff = 0
	s.cancelAt = time.Time{}
	if len(s.cancels) > 0 {
		s.cancelAt = now
	}
}

// releaseRefs removes the leases refs name (releaseScript; in cancel mode
// a lease not found leaves its tombstone), one call per group, in
// parallel, under the Limiter's Timeout. It returns the refs of the calls
// that failed, and the first failure as Take would report it.
func (l *Limiter) releaseRefs(ctx context.Context, refs []leaseRef, cancel bool) ([]leaseRef, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	type group struct {
		id   uint32
		refs []leaseRef
		err  error
	}
	var gs []*group
	for _, r := range refs {
		j := slices.IndexFunc(gs, func(g *group) bool { return g.id == r.group })
		if j < 0 {
			gs = append(gs, &group{id: r.group})
			j = len(gs) - 1
		}
		gs[j].refs = append(gs[j].refs, r)
	}
	tctx, stop := context.WithTimeout(ctx, l.timeout)
	defer stop()
	send := func(g *group) {
		args := make([]any, 0, 3+4*len(g.refs))
		args = append(args, nil, nil, int64(len(g.refs)))
		for _, r := range g.refs {
			args = append(args, r.key)
		}
		for _, r := range g.refs {
			tomb := int64(0)
			if cancel {
				tomb = r.ms
			}
			args = append(args, r.member, r.cost, tomb)
		}
		_, g.err = run(tctx, l.client, &releaseS, args, false)
	}
	var wg sync.WaitGroup
	for _, g := range gs[1:] {
		wg.Go(func() { send(g) })
	}
	send(gs[0])
	wg.Wait()
	var failed []leaseRef
	var err error
	for _, g := range gs {
		if g.err != nil {
			failed = append(failed, g.refs...)
			if err == nil {
				err = l.fail(ctx, tctx, g.err)
			}
		}
	}
	return failed, err
}
