package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// In-flight caps (limiter.Limit.MaxInFlight) are leases on the server's
// clock. The cap of a key is one sorted set (keyNamer.name: "c:" after the
// tag), holding:
//
//   - one member per slot lease, "<tag>:<slot>:<cost>", scored by its
//     expiry in ms of the server's TIME (always the server's TIME, even
//     under the test clock: a lease measures whether its process is still
//     alive, which is real time); tag identifies the Limiter (random),
//     slot is the Decision's Slot, cost the slots it holds;
//   - the member "" scored by minus the slots held (the sum of the leases'
//     costs, expired ones included until a take purges them).
//
// A take purges the expired leases (ZRANGEBYSCORE 1 now, their costs given
// back to the counter, ZREMRANGEBYSCORE), decides against the counter and,
// if the call charges, adds its leases (ZADD now+lease) and the key's
// expiry is moved to its latest lease (PEXPIREAT): all inside the script
// that decides the call's token buckets of the same slot (capScript), so a
// call is one round trip per slot and all-or-nothing across both kinds. A
// release is ZREM of the lease (and its cost given back if it was still
// there: a lease that expired, or a second release, frees nothing). While a
// slot is held, the Limiter's renewer moves its lease's expiry to now+lease
// every lease/3 (ZADD XX on a lease not yet expired), so only a process
// that stops renewing (it died, or lost Redis for a whole lease) loses its
// slots, one lease after its last renewal.
//
// On a *redis.Ring a call's keys are grouped by hash tag, and go-redis
// sends each group to the shard of its tag, so a call across shards runs
// as one across Cluster slots (TestConformanceRing, TestInFlightWithRate),
// and caps are exact while the Ring's shards stay in it. A Ring does not
// replicate: while go-redis's heartbeat holds a shard down, its caps' keys
// go to another shard, where they start empty (a cap of 1 admitted a second
// holder there), and when it is back the leases taken meanwhile stay
// behind, uncounted: their Release goes to the returned shard and frees
// nothing, and they expire one lease after their last renewal. Buckets
// fare alike (they start full on the other shard).

// capScript is partScript extended to in-flight caps: it decides the
// requests of one call that share a slot (the whole call on one server),
// token buckets and caps together, both passes of the dry-run rule, and
// charges what the call's level allows.
//
//	KEYS[i]       request i's bucket, or its cap's sorted set
//	ARGV[1]       the mode, as for gcraScript (the test clock governs
//	              buckets only; leases use the server's TIME)
//	ARGV[2]       the call's level, as for partScript
//	ARGV[3]       the lease tag of the Limiter
//	ARGV[4i]      request i's charge: for a bucket in ns, for a cap its
//	              cost; -1 if it can never fit
//	ARGV[4i+1]    request i's ceiling: for a bucket in ns, for a cap
//	              MaxInFlight; negated for a dry run
//	ARGV[4i+2]    0 for a bucket; for a cap, its lease in ms
//	ARGV[4i+3]    0 for a bucket; for a cap, the slot id of its lease
//
// It returns what partScript returns, a cap's "debt" being the slots held
// before the request.
const capScript = luaPrelude + luaLeases + `
local n, stride, first = #KEYS, 4, 0
local tag = ARGV[3]
local rnow = msNow()

-- arg returns request i's j-th argument (see above).
local function arg(i, j) return ARGV[stride * i + first + j - 1] end

local cap = {}
for i = 1, n do
  if tonumber(arg(i, 3)) > 0 then
    cap[KEYS[i]] = true
    -- A take cancelled before it ran (releaseScript) charges nothing.
    if take and redis.call('ZSCORE', KEYS[i], tombstone(tag .. ':' .. arg(i, 4) .. ':0')) then
      return redis.error_reply('ratekey: call cancelled')
    end
  end
end

-- held returns the slots held in cap k, after purging (for a take) its
-- expired leases.
local function held(k)
  local c = redis.call('ZSCORE', k, '')
  if not c then return 0 end
  local h = -tonumber(c)
  local ex = redis.call('ZRANGEBYSCORE', k, 1, rnow)
  for _, m in ipairs(ex) do
    h = h - tonumber(string.match(m, ':(%d+)$'))
  end
  if h < 0 then h = 0 end
  if take and #ex > 0 then
    redis.call('ZREMRANGEBYSCORE', k, 1, rnow)
    setHeld(k, h)
  end
  return h
end
` + luaCalls + `
-- commit writes pass p's states: buckets' TATs, caps' leases.
local function commit(w, p)
  save(w)
  local touched = {}
  for i = 1, n do
    local lease = tonumber(arg(i, 3))
    if lease > 0 and (p == 1 or tonumber(arg(i, 2)) > 0) then
      local k = KEYS[i]
      local cost = tonumber(arg(i, 1))
      redis.call('ZADD', k, rnow + lease, tag .. ':' .. arg(i, 4) .. ':' .. arg(i, 1))
      redis.call('ZINCRBY', k, -cost, '')
      touched[k] = true
    end
  end
  for k in pairs(touched) do
    expireAtLatest(k)
  end
end
` + luaParts

// luaLeases holds the helpers of the scripts that handle leases
// (capScript, releaseScript, renewScript).
const luaLeases = `
-- msNow returns the server's TIME in ms: leases run on it, even under the
-- test clock.
local function msNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- setHeld sets the counter of cap k to h slots held, deleting the key
-- when none are held and no lease is left in it.
local function setHeld(k, h)
  if h == 0 and redis.call('ZCARD', k) <= 1 then
    redis.call('DEL', k)
  else
    redis.call('ZADD', k, -h, '')
  end
end

-- tombstone returns the tombstone of lease member m: its cost replaced by
-- "x:0" (a cost of 0, so that purging it gives nothing back).
local function tombstone(m)
  return (string.gsub(m, ':%d+$', ':x:0'))
end

-- expireAtLatest moves cap k's expiry to that of its latest lease.
local function expireAtLatest(k)
  local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', k, top[2])
end
`

// releaseScript frees leases: for each i, ZREM of member ARGV[3i-2] from
// cap KEYS[i] and, if it was there, its cost ARGV[3i-1] given back to the
// counter (the key deleted when nothing is held any more). A lease that
// has expired (purged) or was released already frees nothing. ARGV[3i],
// if not 0, makes it a cancel (leases.go): a lease not found leaves its
// tombstone, the member with its cost replaced by "x:0", scored to expire
// ARGV[3i] ms from now (server TIME), so that the acquire it cancels, if
// it runs later, charges nothing (capScript). It returns the number of
// leases removed.
const releaseScript = luaLeases + `
local freed = 0
for i = 1, #KEYS do
  local k, m = KEYS[i], ARGV[3 * i - 2]
  local tomb = tonumber(ARGV[3 * i])
  if redis.call('ZREM', k, m) == 1 then
    freed = freed + 1
    local c = tonumber(redis.call('ZINCRBY', k, tonumber(ARGV[3 * i - 1]), ''))
    if c >= 0 then setHeld(k, 0) end
  elseif tomb > 0 then
    redis.call('ZADD', k, msNow() + tomb, tombstone(m))
    expireAtLatest(k)
  end
end
return freed
`

// renewScript moves the expiry of leases ARGV[2..] of cap KEYS[1] to now
// + ARGV[1] ms (server TIME) if they have not expired yet (an expired
// lease stays so: its slot may already count as free), and the key's
// expiry to its latest lease. It returns the number of leases renewed.
const renewScript = luaLeases + `
local k = KEYS[1]
local now = msNow()
local lease = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  local s = redis.call('ZSCORE', k, ARGV[i])
  if s and tonumber(s) > now then
    redis.call('ZADD', k, 'XX', now + lease, ARGV[i])
    n = n + 1
  end
end
if n > 0 then expireAtLatest(k) end
return n
`

var (
	capS     = newScript(capScript)
	releaseS = newScript(releaseScript)
	renewS   = newScript(renewScript)
)

// defaultLease is the lease of a cap whose Limit.Lease is 0.
const defaultLease = 60 * time.Second

// leaseOf returns r's lease.
func leaseOf(r *limiter.Request) time.Duration {
	if r.Limit.Lease == 0 {
		return defaultLease
	}
	return r.Limit.Lease
}

// hasInFlight reports whether reqs holds an in-flight cap.
func hasInFlight(reqs []limiter.Request) bool {
	for i := range reqs {
		if reqs[i].Limit.MaxInFlight != 0 {
			return true
		}
	}
	return false
}

// runInFlight is run for a call that holds an in-flight cap (reqs are
// valid): one capScript per slot (or Ring tag), the whole call in one round
// trip on one server or within one slot; across slots, the protocol of
// runSplit (the first part charges, the rest at its level, refunds of
// what a later part's rejection undoes: a cap's refund is the ZREM of its
// lease). The deny cache is neither asked nor told: it caches token-bucket
// rejections of one-request calls only. On a Cluster client each Decision's
// HashSlot is 1 + its key's slot, as for calls of token buckets alone.
func (l *Limiter) runInFlight(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request, take bool) ([]limiter.Decision, int, error) {
	for i := range reqs {
		if reqs[i].Limit.MaxInFlight != 0 {
			continue
		}
		if w := gcra.Window(reqs[i].Limit); w > maxWindow {
			return nil, 0, fmt.Errorf("%w: request %d: window %v (burst × interval) exceeds the Redis store's limit of 2^53-1 ns (%v)", limiter.ErrInvalidRequest, i, w, maxWindow)
		}
	}
	c := l.newCapCall(reqs, take)
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	c.ctx = tctx
	var final, rounds int
	var err error
	if take {
		final, rounds, err = l.takeParts(ctx, c)
	} else {
		final, rounds, err = l.peekParts(c)
	}
	if err != nil {
		return nil, rounds, l.fail(ctx, tctx, err)
	}
	dst, err = l.capDecisions(dst, c, final, take)
	return dst, rounds, err
}

// capCall is a call of runInFlight: its requests (handed to goroutines
// across slots: the caller's copy), their buckets' names, groups (slot or
// tag) and lease ids (for caps taken), the process's lease tag, the parts
// decided one script call each, and the context under the call's timeout.
type capCall struct {
	reqs   []limiter.Request
	names  []string
	groups []uint32
	ids    []uint64
	tag    string
	parts  []*part
	ctx    context.Context
	anyDry bool
}

// newCapCall names reqs' buckets, numbers their leases (take) and splits
// them into parts, caps first: their refusal costs no bucket a charge.
func (l *Limiter) newCapCall(reqs []limiter.Request, take bool) *capCall {
	n := len(reqs)
	c := &capCall{reqs: reqs, names: make([]string, n), groups: make([]uint32, n), ids: make([]uint64, n), tag: l.leaseTag(),
		anyDry: slices.ContainsFunc(reqs, func(r limiter.Request) bool { return r.DryRun })}
	for i := range reqs {
		var h uint32
		c.names[i], h = l.names.name(&reqs[i])
		c.groups[i] = l.groupOf(h)
		if reqs[i].Limit.MaxInFlight != 0 && take {
			c.ids[i] = l.leases.seq.Add(1)
		}
	}
	c.parts = partsOf(c.groups, func(i int) uint32 {
		if reqs[i].Limit.MaxInFlight != 0 {
			return 0
		}
		return 1 + l.hint(&reqs[i])
	})
	return c
}

// decideCap runs the script of part p at level (see decideCapPart).
func (l *Limiter) decideCap(c *capCall, p *part, take bool, level int) {
	l.decideCapPart(c.ctx, c.reqs, c.names, c.ids, c.tag, p, take, level)
}

// peekParts decides every part of a Peek at once; final is 2 when all of
// them fit, else 0.
func (l *Limiter) peekParts(c *capCall) (final, rounds int, err error) {
	l.each(c.parts, func(p *part) { l.decideCap(c, p, false, 2) })
	if err := firstErr(c.parts); err != nil {
		return 0, 1, err
	}
	if allFit(c.parts, c.anyDry) {
		return 2, 1, nil
	}
	return 0, 1, nil
}

// takeParts decides a Take's first part, then the rest at the level the
// first charged (2: every request, 1: the enforcing ones, 0: none), and
// refunds what a later part's rejection undoes; final is the level the
// whole call charged. A part whose outcome is unknown (an error) has its
// leases cancelled.
func (l *Limiter) takeParts(ctx context.Context, c *capCall) (final, rounds int, err error) {
	p0, rest := c.parts[0], c.parts[1:]
	l.decideCap(c, p0, true, 2)
	if p0.err != nil {
		// Outcome unknown: the leases, if the script ran (or runs
		// later), are cancelled.
		l.cancelFailed(c.parts[:1], c.reqs, c.names, c.groups, c.ids)
		return 0, 1, p0.err
	}
	level := p0.charged
	final, rounds = level, 1
	if len(rest) == 0 {
		return final, rounds, nil
	}
	rounds++
	l.each(rest, func(p *part) { l.decideCap(c, p, level > 0, level) })
	for _, p := range rest {
		if p.err == nil && level > 0 {
			final = min(final, p.charged)
		}
	}
	if err = firstErr(rest); err != nil {
		final = 0
		l.cancelFailed(rest, c.reqs, c.names, c.groups, c.ids)
	}
	if level > 0 && slices.ContainsFunc(c.parts, func(p *part) bool { return p.err == nil && p.charged > final }) {
		rounds++
		l.refund(ctx, c.reqs, c.names, c.ids, c.parts, final)
	}
	return final, rounds, err
}

// capDecisions appends c's Decisions to dst (charged at level final),
// checks them against the charge, and holds the leases of the caps taken.
func (l *Limiter) capDecisions(dst []limiter.Decision, c *capCall, final int, take bool) ([]limiter.Decision, error) {
	reqs := c.reqs
	second := c.anyDry && slices.ContainsFunc(c.parts, func(p *part) bool { return !p.a1 })
	n0 := len(dst)
	if dst == nil {
		dst = []limiter.Decision{}
	}
	dst = append(dst, make([]limiter.Decision, len(reqs))...)
	out := dst[n0:]
	if err := partDecisions(c.parts, reqs, out, second); err != nil {
		return nil, err
	}
	charged := final > 0
	if charged != enforcingOK(reqs, out) {
		return nil, errDisagree
	}
	if take {
		reserveParts(c.parts, reqs, out, final)
	}
	for i := range reqs {
		if l.shard == bySlot {
			out[i].HashSlot = int(c.groups[i]) + 1 // the slot whose master decided
		}
		if reqs[i].Limit.MaxInFlight == 0 {
			l.learn(&reqs[i], &out[i])
		} else if take && charged && (final == 2 || !reqs[i].DryRun) {
			out[i].Slot = c.ids[i]
			l.hold(c.ids[i], c.names[i], l.member(c.ids[i], &reqs[i]), leaseOf(&reqs[i]))
		}
	}
	return dst, nil
}

// capArgs returns the capScript arguments of r (see capScript).
func capArgs(r *limiter.Request) (charge, ceiling, leaseMS int64) {
	if r.Limit.MaxInFlight == 0 {
		charge, ceiling = chargeCeiling(r)
		return charge, ceiling, 0
	}
	charge, ceiling = r.Cost, r.Limit.MaxInFlight
	if r.Cost > r.Limit.MaxInFlight {
		charge = -1
	}
	if r.DryRun {
		ceiling = -ceiling
	}
	return charge, ceiling, leaseOf(r).Milliseconds()
}

// decidePartArgs is the number of capScript arguments per request.
const capArgsPerReq = 4

// decideCapPart is decidePart with capScript.
func (l *Limiter) decideCapPart(ctx context.Context, reqs []limiter.Request, names []string, ids []uint64, tag string, p *part, take bool, level int) {
	m := len(p.idx)
	args := make([]any, headArgs+m+3+capArgsPerReq*m)
	args[2] = int64(m)
	keys, argv := args[headArgs:headArgs+m], args[headArgs+m:]
	argv[0] = l.mode(take, l.localNow())
	argv[1] = int64(level)
	argv[2] = tag
	for j, i := range p.idx {
		keys[j] = names[i]
		a := argv[3+capArgsPerReq*j:]
		charge, ceiling, lease := capArgs(&reqs[i])
		a[0], a[1], a[2], a[3] = charge, ceiling, lease, strconv.FormatUint(ids[i], 10)
	}
	cmd, err := run(ctx, l.client, &capS, args, !take)
	if err != nil {
		p.err = err
		return
	}
	p.read(cmd, m, level, take)
}

// refundCapsPart is refundPart for a part of a call with caps (see
// refund): its buckets' charges beyond final are given back as refundPart
// does, and its caps' leases beyond final are released (ZREM), each sent
// once.
func (l *Limiter) refundCapsPart(ctx context.Context, reqs []limiter.Request, names []string, ids []uint64, p *part, final int) error {
	// The buckets: a part of their own for refundPart.
	b := &part{sec: p.sec, nsec: p.nsec, charged: p.charged}
	var refs []leaseRef
	for j, i := range p.idx {
		r := &reqs[i]
		if r.Limit.MaxInFlight == 0 {
			b.idx = append(b.idx, i)
			b.d1 = append(b.d1, p.d1[j])
			b.d2 = append(b.d2, p.d2[j])
			continue
		}
		// Charged by the part: all (2) or the enforcing ones (1);
		// kept at final: the same rule at final.
		was := p.charged == 2 || !r.DryRun
		kept := final == 2 || final == 1 && !r.DryRun
		if was && !kept {
			refs = append(refs, l.refOf(names[i], p.group, ids[i], r))
		}
	}
	var err error
	if len(b.idx) > 0 {
		err = l.refundPart(ctx, reqs, names, b, final)
	}
	if failed, e := l.releaseRefs(ctx, refs, false); e != nil {
		l.cancelLater(failed) // their fate is unknown: cancelled once the store answers
		err = e
	}
	return err
}

// cancelFailed queues for cancellation (leases.go) the leases that parts
// whose call failed may have taken: those of their in-flight requests
// (ids[i] != 0), unless the call never left the process.
func (l *Limiter) cancelFailed(parts []*part, reqs []limiter.Request, names []string, groups []uint32, ids []uint64) {
	var refs []leaseRef
	for _, p := range parts {
		if p.err == nil || !mayHaveRun(p.err) {
			continue
		}
		for _, i := range p.idx {
			if ids[i] != 0 {
				refs = append(refs, l.refOf(names[i], groups[i], ids[i], &reqs[i]))
			}
		}
	}
	l.cancelLater(refs)
}

// Release is the [limiter.Limiter] method that frees in-flight slots: for
// every reqs[i] whose ds[i].Slot is non-zero (a lease this Limiter took),
// it stops renewing the lease and removes it from its cap (ZREM; its slots
// counted free again), in one round trip per Redis Cluster slot (or Ring
// shard) of the leases, in parallel; one round trip in all on one server.
// A non-nil error (ctx done, timeout, Redis unreachable) means the outcome
// is unknown: the Limiter then cancels the leases not known to be removed
// in the background (leases.go: sent again until Redis answers, at most a
// second apart), so a slot stays taken no longer than about a second after
// Redis answers again (or one Limit.Lease, default 60 s, if this process
// stops first). A lease that has expired already, or was released
// already, frees nothing (releasing a Decision twice frees no other
// request's slot in this store). Mismatched slices, or a Slot on a
// malformed or token-bucket request, fail with an error wrapping
// [limiter.ErrInvalidRequest], releasing nothing. Safe for concurrent use.
func (l *Limiter) Release(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := gcra.ValidateRelease(reqs, ds); err != nil {
		return err
	}
	var refs []leaseRef
	for i := range ds {
		if ds[i].Slot == 0 {
			continue
		}
		r := &reqs[i]
		l.unhold(ds[i].Slot)
		name, h := l.names.name(r)
		refs = append(refs, l.refOf(name, l.groupOf(h), ds[i].Slot, r))
	}
	failed, err := l.releaseRefs(ctx, refs, false)
	l.cancelLater(failed)
	return err
}

// groupOf returns the group of a key whose hash (keyNamer.name) is h:
// its Cluster slot, its Ring tag, or 0 on one server.
func (l *Limiter) groupOf(h uint32) uint32 {
	switch l.shard {
	case bySlot:
		return uint32(slotOf(h))
	case byTag:
		return h
	}
	return 0
}
