// Package nginxdiff holds the differential test of ratekey against a real
// nginx limit_req (issue 3); it has no non-test code.
//
// The test generates one nginx configuration and the equivalent ratekey
// server from a single table of locations: limit_req zones keyed by a query
// argument ($arg_k, $arg_g) at 1r/s (one at 2r/s), in every burst mode
// (burst=2, burst=2 nodelay, burst=2 delay=1, no burst), with
// limit_req_status 429 or nginx's default 503, limit_req_dry_run, and two
// zones on one request. On the ratekey side each location is a chi route
// with its own RateLimiter over one shared memory store on the real clock,
// with its real wait (a timer); each zone is a policy translated by
// the mapping in limiter/doc.go (nginx burst=N is Burst N+1; plain burst=N
// is DelayAfter 1; delay=D is DelayAfter D+1; nodelay is DelayAfter 0),
// with the location's status, dry run for the whole location, and
// on_missing skip (nginx skips a zone whose key is empty). Both servers run
// on loopback and get the same traces at the same time: six simultaneous
// clients per mode and one more request 1.1 s later; single requests
// spaced 0.5-1.1 s apart; a mixed trace where two zones, a dry-run location
// sharing them, and an empty key meet.
//
// What a pass proves: on those traces, for every request, ratekey answers
// with nginx's status, nginx's decision ($limit_req_status against
// RateLimit-Decision: PASSED, DELAYED, REJECTED, DELAYED_DRY_RUN,
// REJECTED_DRY_RUN) and nginx's completion delay within 150 ms; and both
// match the outcomes written in the traces (the expectations:
// burst=2 gives 1 PASSED, 2 DELAYED near 1 s and 2 s, 3 rejected; nodelay
// 3 PASSED at once and a request 1.1 s later admitted; delay=1 2 PASSED and
// 1 DELAYED ~1 s; no burst 1 of 6; 503 against 429; dry run admits all and
// marks the excess). Simultaneous requests reach the servers in no fixed
// order, so each group is compared as a multiset.
//
// Every run also replays each server's answers through nginx's arithmetic
// at the times that server actually decided them: nginx's access log gives
// $msec - $request_time; ratekey's store runs behind a recorder that sets
// its clock, one call at a time, and notes when each request was decided
// and the delay ratekey applied, which must equal nginx's arithmetic to the
// nanosecond. An answer that this does not account for is a divergence and
// fails the test at once. On a loaded machine (two cores, -race, other
// builds) a process can be kept off the CPU for hundreds of milliseconds,
// and a trace then reaches a server late, or an answer leaves late: a run
// whose mismatches with the trace are all accounted for that way (late
// answers from ratekey only while the test process was measurably stalled)
// was disturbed, not wrong. It is repeated with fresh keys, at most three
// runs in all, and if none is clean the scenario passes with a note (both
// servers still followed nginx's arithmetic on every request).
//
// Two pure tests back it up without nginx. TestTracePredictions replays
// nginx 1.22's arithmetic (the excess of ngx_http_limit_req_lookup and
// _account, in thousandths of a request on a millisecond clock) on the
// nominal arrival times: it must give the outcomes written in the traces,
// and every decision outside a simultaneous group must be at least 200 ms
// of arrival jitter away from flipping (100 ms for the requests 1.1 s after
// a group, the figure). TestNginxArithmeticIsGCRA runs random
// millisecond traces through that arithmetic and through ratekey's
// middleware on a manual clock and finds them identical. nginx's excess is
// GCRA's debt minus one emission interval T, so its rejection test
// (excess > burst·T) is GCRA's (debt > Burst·T) and its delay (excess -
// delay·T) is ratekey's (debt - DelayAfter·T). They differ only in
// resolution: nginx reads a millisecond clock cached per event-loop
// iteration and truncates delays to whole milliseconds; ratekey rounds T up
// to a whole nanosecond, which at rates that do not divide a second into
// whole nanoseconds (3r/s) makes it stricter than nginx when an arrival
// falls exactly on a boundary.
//
// An nginx location must answer from a content handler (this test uses
// empty_gif): "return 200" runs in the rewrite phase, before limit_req's
// preaccess phase, and is never limited.
//
// The live test skips when nginx is not installed, and fails instead when
// CI=true.
package nginxdiff
