// Package bench holds peer benchmarks of ratekey's stores, in a module of
// its own so that the peers (go-redis/redis_rate) never enter ratekey's
// go.mod. Run from this directory:
//
//	go test -run '^$' -bench . -benchtime 3s
//
// The benchmarks start their own redis-server (internal/redistest) and
// skip without one (fail with CI=true).
package bench
