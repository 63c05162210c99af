//go:build race

package middleware_test

// raceSlack is the extra allocation the race detector causes per request:
// in race mode sync.Pool drops a share of its items on purpose, so the
// route lookup's pooled chi context is sometimes allocated anew.
const raceSlack = 1
