package redis

// fetchScript takes a batch of tokens from one bucket for the process's
// hold (see prefetch.go and the package documentation, "Prefetch"), after
// giving back the unused tokens of the bucket's expired batches, if any
// (each with the capped rule of giveBackScript). It takes as many tokens
// as fit, up to the batch asked for, if at least the request's cost fits;
// nothing otherwise. The bucket must have no delay shaping (its ceiling is
// its window), which the Go side checks.
//
//	KEYS[1]  the bucket
//	ARGV[1]  the mode, always a take ("1", or the test clock's "1 s ns slack")
//	ARGV[2]  the emission interval T, in ns
//	ARGV[3]  the window Burst × T, in ns (at most 2^53-1)
//	ARGV[4]  the request's cost, in tokens
//	ARGV[5]  the batch asked for, in tokens (>= cost)
//	ARGV[6+4j .. 9+4j]  refund j: sec, nsec, c, w as ARGV[2..5] of giveBackScript
//
// With d the bucket's debt after the refunds, n = min(batch, floor((window
// - d) / T)) tokens fit; if n >= cost the bucket is charged n × T and the
// script returns {d, n, sec, nsec, g}, else it writes nothing more and
// returns {-1 - d, 0, sec, nsec, g} (the rejection of the request alone,
// decided against d). sec and nsec are the time it decided at (the later
// refund's argument), g the ns the refunds gave back.
const fetchScript = luaPrelude + luaGiveBack + `
local k = KEYS[1]
local g = 0
for j = 6, #ARGV, 4 do
  local r = giveBack(k, ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3])
  if r < 0 then return ` + luaNotTAT + ` end
  g = g + r
end
local d = debt(k)
if not d then
  return ` + luaNotTAT + `
end
local t = tonumber(ARGV[2])
local room = tonumber(ARGV[3]) - d
local n = 0
if room > 0 then n = (room - math.fmod(room, t)) / t end
n = math.min(n, tonumber(ARGV[5]))
if n < tonumber(ARGV[4]) then
  return {-1 - d, 0, sec, nsec, g}
end
store(k, d + n * t)
return {d, n, sec, nsec, g}
`

// luaGiveBack defines giveBack(k, s, ns, c, w), the capped refund of
// "Refunds and the bounds they keep" for one bucket: r = min(c, TAT1 -
// now) with TAT1 = (s, ns) + w; if r > 0 the bucket's debt d becomes d - r
// (its key deleted if that is <= 0). It returns the ns given back, min(r,
// d), 0 for a bucket whose state is gone, or -1 for a state that is not a
// decimal TAT (nothing written).
const luaGiveBack = `
local function giveBack(k, s, ns, c, w)
  local r = math.min(tonumber(c), (tonumber(s) - sec) * 1e9 + (tonumber(ns) - nsec) + tonumber(w))
  if r <= 0 then return 0 end
  local d = debt(k)
  if not d then return -1 end
  if d <= 0 or d >= 9007199254740991 then return 0 end
  if d > r then
    store(k, d - r)
    return r
  end
  redis.call('DEL', k)
  return d
end
`

// giveBackScript returns the unused tokens of one fetch (see the package
// documentation, "Refunds and the bounds they keep": the same capped rule
// as refundScript, for one bucket), and says how much it gave back.
//
//	KEYS[1]  the bucket
//	ARGV[1]  the mode ("1", or the test clock's)
//	ARGV[2]  the seconds of the time the fetch was decided at
//	ARGV[3]  its nanoseconds
//	ARGV[4]  c, the tokens to give back × T, in ns
//	ARGV[5]  w, the bucket's debt right after the fetch, in ns, as of its time
//
// It returns the ns given back (see luaGiveBack), 0 when the state is not
// a decimal TAT (nothing written).
const giveBackScript = luaPrelude + luaGiveBack + `
return math.max(0, giveBack(KEYS[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]))
`

var (
	fetchS    = newScript(fetchScript)    // a batch of tokens for a hold
	giveBackS = newScript(giveBackScript) // a hold's unused tokens, given back
)
