package redis

// fetchScript takes a batch of tokens from one bucket for the process's
// hold (see prefetch.go and the package documentation, "Prefetch"): as
// many as fit, up to the batch asked for, if at least the request's cost
// fits; nothing otherwise. The bucket must have no delay shaping (its
// ceiling is its window), which the Go side checks.
//
//	KEYS[1]  the bucket
//	ARGV[1]  the mode, always a take ("1", or the test clock's "1 s ns slack")
//	ARGV[2]  the emission interval T, in ns
//	ARGV[3]  the window Burst × T, in ns (at most 2^53-1)
//	ARGV[4]  the request's cost, in tokens
//	ARGV[5]  the batch asked for, in tokens (>= cost)
//
// With d the bucket's debt, n = min(batch, floor((window - d) / T)) tokens
// fit; if n >= cost the bucket is charged n × T and the script returns
// {d, n, sec, nsec}, else it writes nothing and returns {-1 - d, 0, sec,
// nsec} (the rejection of the request alone, decided against d). sec and
// nsec are the time it decided at (the refund's argument).
const fetchScript = luaPrelude + `
local k = KEYS[1]
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
  return {-1 - d, 0, sec, nsec}
end
store(k, d + n * t)
return {d, n, sec, nsec}
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
// r = min(c, TAT1 - now) with TAT1 = fetch time + w; if r > 0 the bucket's
// debt d becomes d - r (its key deleted if that is <= 0). It returns the ns
// given back: min(r, d), 0 for a bucket whose state is gone.
const giveBackScript = luaPrelude + `
local k = KEYS[1]
local r = math.min(tonumber(ARGV[4]), (tonumber(ARGV[2]) - sec) * 1e9 + (tonumber(ARGV[3]) - nsec) + tonumber(ARGV[5]))
if r <= 0 then return 0 end
local d = debt(k)
if not d or d <= 0 or d >= 9007199254740991 then return 0 end
if d > r then
  store(k, d - r)
  return r
end
redis.call('DEL', k)
return d
`

var (
	fetchS    = newScript(fetchScript)    // a batch of tokens for a hold
	giveBackS = newScript(giveBackScript) // a hold's unused tokens, given back
)
