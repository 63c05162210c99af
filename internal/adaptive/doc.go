// Package adaptive is the adaptive in-flight cap behind a ratekey policy
// with max_in_flight: auto: a cap on the requests a process runs at once
// whose limit moves, between the policy's min_in_flight and
// max_in_flight_ceiling, with the latency of the requests it admits; and
// the priority classes that share it (critical and sheddable, with a
// reserve for critical work).
//
// # Acquire and release
//
// A [Cap]'s limit, the slots held and the critical ones among them live in
// one 64-bit word. An acquire reads it, decides, and takes a slot with one
// compare-and-swap of the whole word; a limit update swaps the whole word
// too. So an acquire admits against the limit in force at that instant:
// it can never pass a limit that an update lowered meanwhile (the race of
// Netflix concurrency-limits issue 234, and of Envoy's filter before its
// PR 42133: a check, then a separate increment). A lowered limit leaves the
// requests already running their slots; no new one is admitted until
// fewer are held. A release is one atomic add. Neither waits on a lock:
// the controller's lock is only tried, and a sample that finds it taken is
// dropped.
//
// # The limit: a latency gradient, in windows
//
// Samples are the latencies of admitted requests, from admission to
// release, of requests started in the current window only: one admitted
// under an older limit says nothing of the current one (Envoy's issue
// 11579, where such samples inflated the minimum). A window closes with at
// least 16 samples, after at least 100 ms and four times the last
// window's median (a probe window: eight times), keeping a uniform
// reservoir of 64 samples; a busy cap times a random share of its
// requests, about 256 per window. Its median m counts the requests started
// at least twice the last median before it closes: one started later has
// finished only if it was fast, and counting it would bias the median
// toward the requests that did not queue (measured: with it, the limit
// crept to 12 against 8 workers at a median of 21 ms). The median is
// robust to outliers: one slow request among 16 moves it by one rank.
//
// The baseline b is the latency without a queue. Each window then sets
// the limit L:
//
//   - m <= 1.05 b: no queue. If the window held at least L/2 at once
//     (otherwise latency says nothing of L), L grows: it doubles each
//     window until the first cut (the cap starts at min_in_flight, so its
//     first window measures the baseline with few requests running), then
//     grows by L/16, at least 1, after two such windows in a row (the
//     second shows whether the last step built a queue: a window's
//     latency lags its limit).
//   - 1.05 b < m <= 1.15 b (the tolerance): a queue of a twentieth to a
//     seventh of the work in flight; L holds, and the count of windows
//     without a queue starts again.
//   - m > 1.15 b: too long a queue. L becomes L × 1.15 b / m, the
//     gradient (where the latency would be back at 1.15 b were it
//     proportional to the concurrency, as a queue's is), but at least
//     3/4 L: a single slow window cuts a quarter at most.
//
// Against a resource of capacity C, the limit settles where the latency
// is 1.05 to 1.15 b: about 1.1 C (8 to 10 for 8 workers, 35 for 32),
// holding a queue of about C/10. A loss of capacity is followed within a
// few windows (cuts of a quarter at most each), a gain by L/16 every two
// windows without a queue. The band is narrow so that the queue stays short (the
// latency of what is admitted, within 15% of the baseline); a service
// whose window medians wander by more than 15% without load sees its
// limit cut needlessly, and grow back by a sixteenth every two windows.
//
// # The baseline, without Envoy's pitfalls
//
// Envoy's filter measures its minimum latency by pinning the concurrency
// to a few requests for a window, periodically: that blocks traffic (its
// issue 9038, PR 9007 raised the pin from 1 to 3), needs jitter so that a
// fleet does not pin at once (8337), could stay stuck at the minimum
// (10647) and mixed in samples from before the window (11579). Here the
// baseline is measured from the traffic itself:
//
//   - The first window's median is the baseline: the cap starts at
//     min_in_flight, with few requests running.
//   - A window whose median is below the baseline lowers it: at once when
//     by more than the tolerance (a service clearly faster; its window may
//     still have held the old queue, so a probe is due at once), by an
//     eighth of the difference otherwise (noise, most likely: one lucky
//     window does not drag it down).
//   - A probe window, about every 50 windows (each gap drawn between 25
//     and 75, from a seed that differs per cap, so processes drift apart),
//     lets sheddable requests hold half the limit; critical ones keep it
//     all, nothing is pinned, and it follows only a window that used at
//     least half the limit without cutting it. The queue the equilibrium
//     holds drains, and the probe window's median (the latency without a
//     queue, used for nothing else) lowers the baseline: at once when
//     clearly lower, half way otherwise.
//   - The baseline rises only when the latency does not respond to the
//     concurrency: a run of windows above tolerance cuts the limit to a
//     quarter of where it started (or to min_in_flight) and holds it
//     there; three windows there still above tolerance (a quarter of the
//     concurrency would have emptied a queue) re-anchor the baseline at
//     their median, and a probe is due at once. A slower service (a
//     deploy, a slower database) is thus learnt in a few windows without
//     pinning to a constant; the price is a dip to a quarter meanwhile. A
//     capacity lost by more than four times at once reads as a slower
//     service the same way, until the probe (half the limit for sheddable
//     work) finds the latency without a queue.
//
// # Priorities
//
// A request is critical or sheddable. A critical one is admitted while
// fewer than the limit are held. A sheddable one while the sheddable
// requests hold fewer than the limit less the reserve (reserved% of it,
// rounded to the nearest slot) less what critical work needed lately (the
// most critical slots held at once in this window or the last, or held
// now if more). So sheddable requests are refused first; a critical
// request finds the reserve free beyond the critical work of late, and is
// refused only when the whole limit is held, then by at least the reserve
// of critical work; sheddable work keeps every slot below the limit less
// the reserve that critical work does not need.
package adaptive
