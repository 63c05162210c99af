package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	goredis "github.com/redis/go-redis/v9"
)

// luaPrelude starts every script that decides or refunds token buckets:
// the call's mode and time from ARGV[1] (see gcraScript) and the two
// helpers they share, which read and write a bucket's state.
const luaPrelude = `
local take = ARGV[1] == '1'
local sec, nsec, slack
if take or ARGV[1] == '0' then
  local t = redis.call('TIME')
  sec = tonumber(t[1])
  nsec = tonumber(t[2]) * 1000
else
  local m, s, ns, sl = string.match(ARGV[1], '^([01]) (%d+) (%d+) (%d+)$')
  take = m == '1'
  sec, nsec, slack = tonumber(s), tonumber(ns), tonumber(sl)
end

-- debt returns the debt of bucket k in ns (TAT - now, clamped to 0..2^53-1),
-- 0 for a bucket with no state, or nil if its state is not a decimal TAT;
-- v, if given, is k's value already read (false: none).
local function debt(k, v)
  if v == nil then v = redis.call('GET', k) end
  if not v then return 0 end
  local l = #v
  local ts, tn = 0, nil
  if l > 9 then
    ts = tonumber(string.sub(v, 1, l - 9))
    tn = tonumber(string.sub(v, l - 8))
  else
    tn = tonumber(v)
  end
  if not ts or not tn then return nil end
  local d = (ts - sec) * 1e9 + (tn - nsec)
  if d < 0 then return 0 elseif d > 9007199254740991 then return 9007199254740991 end
  return d
end

-- store sets bucket k's TAT to now + w ns, written as decimal digits, to
-- expire when the bucket is full again (with a test clock: after w rounded
-- up to ms, plus slack ms).
local function store(k, w)
  local r = math.fmod(w, 1e9)
  local ts = sec + (w - r) / 1e9
  local tn = nsec + r
  if tn >= 1e9 then
    tn = tn - 1e9
    ts = ts + 1
  end
  local v = string.format('%d%09d', ts, tn)
  if not slack then
    local rm = math.fmod(tn, 1e6)
    local ms = ts * 1000 + (tn - rm) / 1e6
    if rm > 0 then ms = ms + 1 end
    redis.call('SET', k, v, 'PXAT', string.format('%d', ms))
  else
    local rm = math.fmod(w, 1e6)
    local ms = (w - rm) / 1e6 + slack
    if rm > 0 then ms = ms + 1 end
    redis.call('SET', k, v, 'PX', string.format('%d', ms))
  end
end
`

// luaFits is the rule that admits a request, as a Lua expression over the
// locals charge (the request's charge, -1 if it can never fit), ceiling
// (its ceiling, negated for a dry run) and d (the state it is decided
// against): oneScript and luaCalls write it in place. (A Lua function
// holding it costs oneScript, the hot path, about 0.1 µs a call: 6.6 ->
// 6.7 µs usec_per_call, a closure created and called per call.)
const luaFits = `charge >= 0 and d <= math.abs(ceiling) - charge`

// luaNotTAT is the error reply of a script that found a bucket whose
// state is not a decimal TAT (debt returned nil).
const luaNotTAT = `redis.error_reply('ratekey: bucket state is not a decimal TAT')`

// gcraScript decides every request of one call in one atomic step. It is
// the store side of [Limiter.Take] and [Limiter.Peek]; the Go side turns the
// debts it returns into Decisions with [gcra.Decide].
//
// Lua numbers are IEEE doubles, exact on integers up to 2^53. Every
// quantity the script adds or compares is an integer number of
// nanoseconds no larger than 2^53: charge = Cost·Interval and ceiling =
// gcra.Ceiling are computed in Go (int64) and bounded by the window,
// which Take refuses above 2^53-1 ns; debts are clamped to 2^53-1 (so the
// one-request script's reply -1-debt is exact too). Absolute
// times (about 1.8·10^18 ns since 1970) are never held in one number: they
// travel as (seconds, nanoseconds) pairs, and a stored TAT is split at its
// ninth digit from the right before any arithmetic. Integer division uses
// math.fmod, which is exact. The expiry (ms, 13 digits) is passed to SET as
// string.format('%d', ms), exact and cheaper than the %.17g formatting
// Redis applies to a Lua number argument.
//
//	KEYS[i]     the bucket of request i (duplicates allowed)
//	ARGV[1]     "1": take (charge if the rule says so); "0": peek (write
//	            nothing); now is the server's TIME and a state expires at
//	            its TAT (SET ... PXAT). With a test clock: "1 s ns slack" or
//	            "0 s ns slack": now is s seconds + ns nanoseconds, and a
//	            state expires (SET ... PX) after its debt rounded up to ms
//	            plus slack ms of real time.
//	ARGV[2i]    request i's charge in ns, or -1 if it can never fit
//	ARGV[2i+1]  request i's ceiling in ns, negated if request i is a dry run
//	            (a ceiling is at least 1ns)
//
// (Two arguments per request and one per call: every argument is a string
// the server creates for each call.)
//
//	ARGV[2n+2]  optional: when present (any value), the reply ends with
//	            the time the call was decided at (for settling requests,
//	            whose Reservation is that time + debt + charge)
//
// It returns {charged, debt_1, ..., debt_n} (then sec, nsec when asked):
// charged is 1 if the call charges (for a peek: would charge) every
// request, 2 if it charges the enforcing requests alone (the dry-run
// rule's second pass), 0 if nothing, and debt_i is the bucket's debt in ns
// (TAT - now, at least 0) that request i was decided against, in the pass
// whose Decision the contract reports for it.
const gcraScript = luaPrelude + `
local n, stride, first, cap, held = #KEYS, 2, 0, nil, nil
` + luaCalls + `
-- First pass: every request, in order. Second pass, if a request was
-- rejected and some are dry runs: the enforcing requests alone.
local out = {0}
local w, all, dry = pass(1, out, 1)
local charged = 1
if not all and dry then
  w, all = pass(2, out, 1)
  charged = 2
end

if all then
  out[1] = charged
  if take then save(w) end
end
if ARGV[2 * n + 2] then
  out[n + 2] = sec
  out[n + 3] = nsec
end
return out
`

// luaCalls is the part of gcraScript, partScript and capScript that
// decides the requests of a call: the state of each of its keys, read
// once (base), and the passes of the dry-run rule (pass), then save, which
// writes the buckets' states a pass left. Before it a script declares n
// (#KEYS); stride and first, its argument layout: request i's charge is
// ARGV[stride·i + first] and its ceiling the argument after it (see
// gcraScript); cap, the set of its keys that are in-flight caps (nil but
// in capScript: an empty table, created per call, costs gcraScript about
// 0.3 µs a call); and held, capScript's reader of a cap's state (nil
// elsewhere).
const luaCalls = `
-- base[k] is the state key k is decided against, read once: a bucket's
-- debt, a cap's slots held.
local base = {}
for i = 1, n do
  local k = KEYS[i]
  if not base[k] then
    local d
    if cap and cap[k] then d = held(k) else d = debt(k) end
    if not d then
      return ` + luaNotTAT + `
    end
    base[k] = d
  end
end

-- pass decides, in order, the requests of pass p (1: every request; 2:
-- the enforcing ones, whose ceiling is positive), each against its key's
-- state after the pass's earlier charges, and sets out[at + i] to the
-- state request i was decided against (to skip, if given, for a request
-- the pass leaves out). A request is admitted if its charge is not -1
-- (it can never fit) and fits under its ceiling (negated for a dry run).
-- It returns the states after the pass's charges, whether every request
-- it decided is admitted, and whether the call has dry-run requests.
local function pass(p, out, at, skip)
  local w, all, dry = {}, true, false
  for i = 1, n do
    local a = stride * i + first
    local ceiling = tonumber(ARGV[a + 1])
    if ceiling < 0 then dry = true end
    if p == 1 or ceiling > 0 then
      local k = KEYS[i]
      local d = w[k] or base[k]
      out[at + i] = d
      local charge = tonumber(ARGV[a])
      if ` + luaFits + ` then
        w[k] = d + charge
      else
        all = false
      end
    elseif skip then
      out[at + i] = skip
    end
  end
  return w, all, dry
end

-- save writes the states of the buckets in w (a pass's states): their
-- TATs, with their expiry.
local function save(w)
  for k, d in pairs(w) do
    if not (cap and cap[k]) then store(k, d) end
  end
end
`

// oneScript is gcraScript for a call of one request, which is most calls
// (one policy per HTTP request): same KEYS and ARGV (n = 1), same
// arithmetic, same writes, but no tables, no loops and no second pass, and
// a one-integer reply, so Redis runs a smaller script and the client
// parses a smaller reply. A single request charges exactly when it is
// allowed; a rejected dry-run request leaves the call with no enforcing
// request, so gcraScript reports it as charging (nothing).
//
// It returns d, the debt in ns (at least 0) the request was decided
// against, if the call charges (for a peek: would charge), and -1 - d if it
// does not: the {charged, debt_1} of gcraScript in one integer; with a
// fourth argument (a settling request: see gcraScript's ARGV[2n+2]),
// "<that integer> <sec> <nsec>", a string (the client parses it without
// allocating, where an array reply costs it four allocations).
const oneScript = luaPrelude + `
local k = KEYS[1]

local d = debt(k)
if not d then
  return ` + luaNotTAT + `
end

local charge = tonumber(ARGV[2])
local ceiling = tonumber(ARGV[3])
local r = d
if not (` + luaFits + `) then
  if ceiling >= 0 then r = -1 - d end
elseif take then
  store(k, d + charge)
end
if ARGV[4] then return string.format('%d %d %d', r, sec, nsec) end
return r
`

// partScript decides the requests of one call that share a slot, when
// the call spans several slots (see runSplit), with both passes of the
// dry-run rule computed, and charges what the call's level allows.
//
//	KEYS[i]       the bucket of request i (duplicates allowed)
//	ARGV[1]       the mode, as for gcraScript
//	ARGV[2]       the call's level: 2 if the first pass may charge (no
//	              part of the call has failed it yet), 1 if only the
//	              second pass may (one has, and has dry-run requests)
//	ARGV[2i+1]    request i's charge in ns, or -1 if it can never fit
//	ARGV[2i+2]    request i's ceiling in ns, negated for a dry run
//
// It returns {a1, a2, sec, nsec, d1_1..d1_n, d2_1..d2_n}: a1 = 1 if every
// request fits in the first pass, a2 = 1 if every enforcing request fits in
// the second (enforcing requests alone); sec and nsec the time it decided
// at; d1_i the debt request i was decided against in the first pass, d2_i
// in the second (-1 for a dry-run request). A take charges the first
// pass's states if the level is 2 and a1 = 1, else the second's if a2 = 1,
// else nothing.
const partScript = luaPrelude + `
local n, stride, first, cap, held = #KEYS, 2, 1, nil, nil
` + luaCalls + `
local commit = save
` + luaParts

// luaParts ends partScript and capScript: both passes of the call's
// requests into the reply {a1, a2, sec, nsec, d1_1..d1_n, d2_1..d2_n}
// (see partScript), and for a take the states of the pass the call's
// level (ARGV[2]) allows written by commit(w, p), which the script
// declares before it (w the pass's states, p the pass).
const luaParts = `
local out = {1, 1, sec, nsec}
local w1, a1 = pass(1, out, 4)
local w2, a2 = pass(2, out, 4 + n, -1)
if not a1 then out[1] = 0 end
if not a2 then out[2] = 0 end

if take then
  if tonumber(ARGV[2]) == 2 and a1 then
    commit(w1, 1)
  elseif a2 then
    commit(w2, 2)
  end
end
return out
`

// refundScript gives back charges of a call that a later slot rejected
// (see runSplit and the package documentation, "Refunds"). It moves each
// bucket's TAT back by the part of the charge that has not refilled yet,
// which is never more than what the charge still holds in the bucket, so a
// bucket is never left fuller than had the charge not happened.
//
//	KEYS[i]       a bucket to refund
//	ARGV[1]       the mode, as for gcraScript ("1", or the test clock's)
//	ARGV[2]       the seconds of the time the charge was decided at
//	ARGV[3]       its nanoseconds
//	ARGV[2i+2]    c_i, the charge to give back in ns
//	ARGV[2i+3]    w_i, the bucket's debt right after the charge, in ns, as
//	              of the charge's time
//
// With now the current time, TAT1 = charge time + w_i is the TAT the
// charge left; r = min(c_i, TAT1 - now) is what of the charge has not
// refilled yet; if r > 0 the bucket's debt d (now) becomes d - r (its key
// deleted if that is 0: a full bucket). A bucket whose state is gone
// (expired, or lost in a failover) is left alone. It returns the number of
// buckets it changed.
const refundScript = luaPrelude + `
local s1, n1 = tonumber(ARGV[2]), tonumber(ARGV[3])
local changed = 0
for i = 1, #KEYS do
  local k = KEYS[i]
  local c = tonumber(ARGV[2 * i + 2])
  local w = tonumber(ARGV[2 * i + 3])
  local r = math.min(c, (s1 - sec) * 1e9 + (n1 - nsec) + w)
  if r > 0 then
    local d = debt(k)
    if d and d > 0 and d < 9007199254740991 then
      if d > r then store(k, d - r) else redis.call('DEL', k) end
      changed = changed + 1
    end
  end
end
return changed
`

// script is a Lua script and the SHA-1 EVALSHA names it by.
type script struct {
	src string
	sha any // the hex SHA-1, a string boxed once: boxing it per call allocates
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	many = newScript(gcraScript) // calls of two or more requests
	one  = newScript(oneScript)  // calls of one request

	partS   = newScript(partScript)   // one slot's part of a call across slots
	refundS = newScript(refundScript) // a refund of such a part
)

// noRetryCmd is a go-redis command that the client must not replay after
// a failed attempt: a Take whose reply was lost may have charged, and a
// replay would charge again. (go-redis still retries an attempt that never
// reached the wire.)
type noRetryCmd struct{ *goredis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (noRetryCmd) NoRetry() bool { return true }

// run executes s with args = the EVALSHA arguments after the SHA
// (numkeys, keys..., argv...) in cmdArgs[2:], by EVALSHA and, if the
// server does not know the script (NOSCRIPT: a restarted or new server),
// by EVAL, which also loads it. cmdArgs[0] and [1] are overwritten.
func run(ctx context.Context, c goredis.UniversalClient, s *script, cmdArgs []any, retry bool) (*goredis.Cmd, error) {
	cmdArgs[0], cmdArgs[1] = "evalsha", s.sha
	cmd, err := process(ctx, c, cmdArgs, retry)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		cmdArgs[0], cmdArgs[1] = "eval", s.src
		cmd, err = process(ctx, c, cmdArgs, retry)
	}
	return cmd, err
}

func process(ctx context.Context, c goredis.UniversalClient, args []any, retry bool) (*goredis.Cmd, error) {
	cmd := goredis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // KEYS[1]: the Cluster slot
	var err error
	if retry {
		err = c.Process(ctx, cmd)
	} else {
		err = c.Process(ctx, noRetryCmd{cmd})
	}
	if err == nil {
		err = cmd.Err()
	}
	return cmd, err
}
