// Package bench holds ratekey's peer benchmarks (issue 8), in a module of
// its own so that the peers never enter ratekey's go.mod, and so that the
// root module's `go test ./...` never runs them. It measures whatever
// library is in the working tree (go.mod replaces ratekey with ../).
//
// The whole suite, with the ratio table of BENCHMARKS.md at the end:
//
//	bench/run.sh                     # COUNT=5 runs, 9 to 13 minutes on 2 cores
//
// A smoke test (everything compiles and runs once; 30 s to two minutes, most
// of it filling 1M-key limiters):
//
//	cd bench && go test -run xxx -bench . -benchtime=1x ./...
//
// Every comparison runs ratekey and its peers in one process on identical
// inputs, taking turns in slices (see interleave), and reports each one's
// numbers as custom metrics (<name>-ns/op, <name>-cpu-ns/op,
// <name>-allocs/op, ...); cmd/benchtable turns a file of such runs into
// medians, ratios and PASS/FAIL against the targets. The benchmarks that
// build large limiters (BenchmarkKeyed, BenchmarkMemoryPerKey,
// BenchmarkJWT) are meant to be run with a fixed -benchtime=Nx, as run.sh
// does. The Redis benchmarks start their own redis-server
// (internal/redistest) and skip without one (fail with CI=true).
package bench
