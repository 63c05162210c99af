//go:build race

package ratekey_test

// raceSlack is the extra allocations the race detector causes per request:
// in race mode sync.Pool drops a random share of its items on purpose, so
// pooled objects (chi's routing contexts, the route lookup's, and the rate
// limiter's working memory) are sometimes allocated anew. The exact bound
// holds without -race.
const raceSlack = 3
