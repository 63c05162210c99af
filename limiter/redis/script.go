package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	goredis "github.com/redis/go-redis/v9"
)

// luaPrelude starts both scripts: the call's mode and time from ARGV[1]
// (see gcraScript) and the two helpers they share, which read and write a
// bucket's state.
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
-- 0 for a bucket with no state, or nil if its state is not a decimal TAT.
local function debt(k)
  local v = redis.call('GET', k)
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
// It returns {charged, debt_1, ..., debt_n}: charged is 1 if the call
// charges (for a peek: would charge), and debt_i is the bucket's debt in
// ns (TAT - now, at least 0) that request i was decided against, in the
// pass whose Decision the contract reports for it.
const gcraScript = luaPrelude + `
local n = #KEYS

-- The debt of every bucket of the call, read once.
local base = {}
for i = 1, n do
  local k = KEYS[i]
  if not base[k] then
    local d = debt(k)
    if not d then
      return redis.error_reply('ratekey: bucket state is not a decimal TAT')
    end
    base[k] = d
  end
end

-- admit decides request i against its bucket's debt d: the debt after
-- charging it, or nil if it is rejected (it can never fit, or it does not
-- fit under its ceiling, whose sign marks a dry run).
local function admit(i, d)
  local charge = tonumber(ARGV[2 * i])
  local ceiling = math.abs(tonumber(ARGV[2 * i + 1]))
  if charge >= 0 and d <= ceiling - charge then
    return d + charge
  end
  return nil
end

-- First pass: every request, in order.
local out = {0}
local work = {}
local all, dry = true, false
for i = 1, n do
  local k = KEYS[i]
  local d = work[k] or base[k]
  out[i + 1] = d
  if tonumber(ARGV[2 * i + 1]) < 0 then
    dry = true
  end
  local w = admit(i, d)
  if w then work[k] = w else all = false end
end

-- Second pass, if a request was rejected and some are dry runs: the
-- enforcing requests alone.
if not all and dry then
  work = {}
  all = true
  for i = 1, n do
    local ceiling = tonumber(ARGV[2 * i + 1])
    if ceiling > 0 then
      local k = KEYS[i]
      local d = work[k] or base[k]
      out[i + 1] = d
      local w = admit(i, d)
      if w then work[k] = w else all = false end
    end
  end
end

if all then
  out[1] = 1
  if take then
    for k, d in pairs(work) do
      store(k, d)
    end
  end
end
return out
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
// does not: the {charged, debt_1} of gcraScript in one integer.
const oneScript = luaPrelude + `
local k = KEYS[1]

local d = debt(k)
if not d then
  return redis.error_reply('ratekey: bucket state is not a decimal TAT')
end

local charge = tonumber(ARGV[2])
local ceiling = tonumber(ARGV[3])
if charge < 0 or d > math.abs(ceiling) - charge then
  if ceiling < 0 then return d end
  return -1 - d
end
if take then
  store(k, d + charge)
end
return d
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
local n = #KEYS
local level = tonumber(ARGV[2])

local base = {}
for i = 1, n do
  local k = KEYS[i]
  if not base[k] then
    local d = debt(k)
    if not d then
      return redis.error_reply('ratekey: bucket state is not a decimal TAT')
    end
    base[k] = d
  end
end

local function admit(i, d)
  local charge = tonumber(ARGV[2 * i + 1])
  local ceiling = math.abs(tonumber(ARGV[2 * i + 2]))
  if charge >= 0 and d <= ceiling - charge then
    return d + charge
  end
  return nil
end

local out = {1, 1, sec, nsec}
local w1, w2 = {}, {}
for i = 1, n do
  local k = KEYS[i]
  local d = w1[k] or base[k]
  out[4 + i] = d
  local w = admit(i, d)
  if w then w1[k] = w else out[1] = 0 end
end
for i = 1, n do
  out[4 + n + i] = -1
  if tonumber(ARGV[2 * i + 2]) > 0 then
    local k = KEYS[i]
    local d = w2[k] or base[k]
    out[4 + n + i] = d
    local w = admit(i, d)
    if w then w2[k] = w else out[2] = 0 end
  end
end

if take then
  if level == 2 and out[1] == 1 then
    for k, d in pairs(w1) do store(k, d) end
  elseif out[2] == 1 then
    for k, d in pairs(w2) do store(k, d) end
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
