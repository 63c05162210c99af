//go:build race

package middleware_test

// raceSlack is the extra allocations the race detector causes per request:
// in race mode sync.Pool drops a random share of its items on purpose, so
// pooled chi contexts (the route lookup's, and the routers' own, which chi
// then fills afresh) are sometimes allocated anew. The exact bound holds
// without -race.
const raceSlack = 3
