package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// settleScript settles reservations (see [Limiter.Settle] and the rule of
// package limiter, "Reserve, then settle") for one or more settle calls,
// merged by the batcher (see the package documentation, "Batching"), one
// bucket after the other, in one atomic step. The buckets of call c are
// the next m_c keys, and its arguments the next 1+3·m_c:
//
//	KEYS          the buckets of call 1, then of call 2, ...
//	ARGV[1]       the mode, as for gcraScript ("1", or the test clock's)
//	then per call c:
//	  m_c           its number of buckets
//	  per bucket i:
//	    x_i         the change in ns, (actual - reserved) × interval:
//	                > 0 a debt, < 0 a refund of -x_i
//	    s_i, ns_i   the seconds and nanoseconds of the TAT the
//	                reservation's charge left
//
// A debt is charged unconditionally: the bucket's debt d (0 for a full or
// missing bucket) becomes d + x_i, clamped to 2^53-1 ns. A refund moves the
// debt back by r = min(-x_i, TAT1 - now), the part of the reservation not
// yet refilled, as refundScript does (the key deleted when that leaves it
// full); a bucket that is full, gone, or whose debt is the clamp is left
// alone.
//
// It returns {n_1, n_2, ...}: n_c is the number of buckets call c
// changed, or -1 if one of its buckets holds something other than a
// decimal TAT (another type, which GET refuses with WRONGTYPE, or another
// string): then none of call c's buckets is changed, and the other calls
// are settled as if it were not there. Every bucket of a call is read
// before any is written, so a call applies whole or not at all; a bucket
// named twice in one call is read again at its second settle.
const settleScript = luaPrelude + `
local out, k, a = {}, 1, 2
while a <= #ARGV do
  local m = tonumber(ARGV[a])
  local ds, changed = {}, 0
  for j = 1, m do
    local v = redis.pcall('GET', KEYS[k + j - 1])
    if type(v) == 'table' then changed = -1 break end
    ds[j] = debt(nil, v)
    if not ds[j] then changed = -1 break end
  end
  local seen = {}
  for j = 1, changed == 0 and m or 0 do
    local key, b = KEYS[k + j - 1], a + 3 * j - 2
    local x, d = tonumber(ARGV[b]), ds[j]
    if seen[key] then d = debt(key) end
    seen[key] = true
    if x > 0 then
      store(key, math.min(d + x, 9007199254740991))
      changed = changed + 1
    else
      local r = math.min(-x, (tonumber(ARGV[b + 1]) - sec) * 1e9 + (tonumber(ARGV[b + 2]) - nsec))
      if r > 0 and d > 0 and d < 9007199254740991 then
        if d > r then store(key, d - r) else redis.call('DEL', key) end
        changed = changed + 1
      end
    end
  end
  out[#out + 1] = changed
  k, a = k + m, a + 1 + 3 * m
end
return out
`

var settleS = newScript(settleScript)

// settleArgsPerKey is the number of settleScript arguments per bucket.
const settleArgsPerKey = 3

// settling is one bucket a Settle changes: its request, its Redis key, its
// group (slot or Ring tag), the change in ns and the Reservation.
type settling struct {
	r       *limiter.Request
	name    string
	group   uint32
	x, tat1 int64
}

// Settle replaces the reservations that Take charged by the actual costs,
// as the [limiter.Limiter] contract and the rule of package limiter
// ("Reserve, then settle") say, at the Redis server's time: for every
// reqs[i] whose ds[i].Reservation is non-zero (the TAT its charge left, on
// the server's clock) and whose actual[i] differs from its Cost, a debt is
// charged unconditionally (the bucket's debt may pass its window, up to
// 2^53-1 ns) or a refund given back, capped by what of the reservation has
// not refilled, never past a full bucket. Nothing to change costs no round
// trip; otherwise one script call (batched with the other calls to the
// server, as Take's are) on one server or within one Cluster slot, and one
// per slot in parallel across slots.
//
// A settle is sent once and never retried: not by go-redis after a failed
// attempt (the call is marked not to be), not by the batcher (it resends
// only calls that the server answered NOSCRIPT, which ran nothing), and
// not by this method, since a resend would charge or refund twice. An
// error (a timeout, Redis unreachable) means the outcome is unknown: the
// settle may have been applied or not, and a bucket whose settle is lost
// keeps its reservation as the cost. A refund lowers the process's deny
// cache bound for the bucket by the same amount, so that the cache stays
// a lower bound; a debt that landed raises it, so that a cached rejection
// says how long the debt takes to repay. Errors wrap [limiter.ErrInvalidRequest] as the contract
// says (nothing sent), ctx.Err(), or [ErrTimeout] (within
// [Options.Timeout]). Safe for concurrent use.
func (l *Limiter) Settle(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision, actual []int64) error {
	var dbuf [callReqs]int64
	deltas := dbuf[:]
	if len(reqs) > callReqs {
		deltas = make([]int64, len(reqs))
	}
	if err := gcra.ValidateSettle(reqs, ds, actual, 1, deltas); err != nil {
		return err
	}
	var buf [callReqs]settling
	todo := buf[:0]
	one := true // every bucket in one group: one call
	for i, x := range deltas[:len(reqs)] {
		if x == 0 {
			continue
		}
		r := &reqs[i]
		name, h := l.names.name(r)
		todo = append(todo, settling{r: r, name: name, group: l.groupOf(h), x: x, tat1: ds[i].Reservation})
		one = one && todo[len(todo)-1].group == todo[0].group
	}
	if len(todo) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	if one {
		err = l.settleGroup(ctx, todo)
	} else {
		err = l.settleGroups(ctx, todo)
	}
	if l.deny != nil {
		for _, s := range todo {
			l.deny.settled(s.r, s.x, err == nil)
		}
	}
	return err
}

// settleGroups sends the settles of todo, which span several groups
// (Cluster slots or Ring tags), one settleScript call per group, in
// parallel (the first on this goroutine), and returns the first error.
func (l *Limiter) settleGroups(ctx context.Context, todo []settling) error {
	todo = slices.Clone(todo) // handed to goroutines
	slices.SortStableFunc(todo, func(a, b settling) int { return int(a.group) - int(b.group) })
	var groups [][]settling
	for i := 0; i < len(todo); {
		j := i + 1
		for j < len(todo) && todo[j].group == todo[i].group {
			j++
		}
		groups = append(groups, todo[i:j])
		i = j
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g := 1; g < len(groups); g++ {
		wg.Go(func() { errs[g] = l.settleGroup(ctx, groups[g]) })
	}
	errs[0] = l.settleGroup(ctx, groups[0])
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// settleGroup sends the settles of one server, slot or Ring tag as one
// settleScript call, through the server's batcher when batching is on
// (which may merge it with other settles bound for the same slot).
func (l *Limiter) settleGroup(ctx context.Context, todo []settling) error {
	m := len(todo)
	k := headArgs + m + 2 + settleArgsPerKey*m
	c := getCall(k)
	c.s, c.take, c.deadline = &settleS, true, l.deadline(ctx)
	c.args[2] = int64(m)
	if l.now != nil {
		c.sent = l.localNow()
	}
	c.args[headArgs+m] = l.mode(true, c.sent)
	c.keys, c.part = int64(m), 0
	c.args[headArgs+m+1] = &c.keys
	for j := range todo {
		c.setSettleArgs(j, m, &todo[j])
	}
	var b *batcher
	switch {
	case l.maxBatch <= 1 || l.shard == byTag:
	case l.shard == oneServer:
		b = &l.single
	default:
		// MasterForKey may load the slot map: under the deadline.
		tctx, cancel := context.WithDeadline(ctx, c.deadline)
		b = l.batcherFor(tctx, todo[0].name)
		cancel()
	}
	var cmd *goredis.Cmd
	var err error
	reuse := true
	if b != nil {
		c.merge, c.group = true, todo[0].group
		cmd, err, reuse = l.submit(ctx, b, c)
	} else {
		tctx, cancel := context.WithDeadline(ctx, c.deadline)
		c.resend(l)
		if cmd, err = run(tctx, l.client, c.s, c.args, false); err != nil {
			err = l.fail(ctx, tctx, err)
		}
		cancel()
	}
	if err == nil {
		err = settleReply(cmd, c.part)
	}
	if reuse {
		putCall(c)
	}
	return err
}

// errNotTAT is the error of a settle that found a bucket whose state is
// not a decimal TAT (a key of another type, or another string): nothing of
// that settle was applied.
var errNotTAT = errors.New("limiter/redis: settle: bucket state is not a decimal TAT (nothing settled)")

// settleReply returns the error of the settle whose result is part of
// settleScript's reply cmd: nil, or errNotTAT.
func settleReply(cmd *goredis.Cmd, part int) error {
	v, err := cmd.Slice()
	if err != nil || part >= len(v) {
		return fmt.Errorf("limiter/redis: settle: unexpected reply %v (outcome unknown): %w", cmd.Val(), err)
	}
	if n, ok := v[part].(int64); !ok || n < 0 {
		if ok {
			return errNotTAT
		}
		return fmt.Errorf("limiter/redis: settle: unexpected reply %v (outcome unknown)", cmd.Val())
	}
	return nil
}

// setSettleArgs sets c's key and arguments for bucket j of a settle of m
// buckets (see settleScript).
func (c *call) setSettleArgs(j, m int, s *settling) {
	keys, argv := c.args[headArgs:headArgs+m], c.args[headArgs+m+2:]
	v := [settleArgsPerKey]int64{s.x, s.tat1 / 1e9, s.tat1 % 1e9}
	a := argv[settleArgsPerKey*j:]
	if m > callReqs {
		keys[j], a[0], a[1], a[2] = s.name, v[0], v[1], v[2]
		return
	}
	c.names[j] = s.name
	keys[j] = &c.names[j]
	for q := range v {
		c.nums[settleArgsPerKey*j+q] = v[q]
		a[q] = &c.nums[settleArgsPerKey*j+q]
	}
}
