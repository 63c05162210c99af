#!/usr/bin/env bash
# Runs the whole peer benchmark suite and prints the ratio table of
# BENCHMARKS.md. From the repository root or from bench/:
#
#   bench/run.sh                 # COUNT=5 runs of everything (12 to 16 minutes on 2 cores)
#   COUNT=1 bench/run.sh         # one run of everything, a quick look
#   ONLY='Keyed|MemoryPerKey' bench/run.sh   # a subset (regexp on groups)
#
# Output goes to $OUT (default bench/results): raw.txt (go test output),
# benchstat.txt (benchstat of raw.txt) and table.md (the ratio table, also
# printed). Each benchmark interleaves ratekey and its peers inside one
# process; COUNT repeats give medians. The Redis group starts its own
# redis-server (skipped without one on PATH).
set -euo pipefail

cd "$(dirname "$0")"
COUNT=${COUNT:-5}
OUT=${OUT:-results}
ONLY=${ONLY:-.}
mkdir -p "$OUT"
raw="$OUT/raw.txt"
: >"$raw"

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(go version)" | tee -a "$raw"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$raw"

go test -c -o "$OUT/bench.test" .

# group name, -bench regexp, -benchtime, -count
groups=(
	"Keyed         ^BenchmarkKeyed$                      1000000x $COUNT"
	"MemoryPerKey  ^BenchmarkMemoryPerKey$               1x       1"
	"ClientIP3     ^BenchmarkClientIP$/^prefixes=3$/     300000x  $COUNT"
	"ClientIP2000  ^BenchmarkClientIP$/^prefixes=2000$/  20000x   $COUNT"
	"JWT           ^BenchmarkJWT$                        2000x    $COUNT"
	"Chain         ^BenchmarkChain$                      200000x  $COUNT"
	"Loopback      ^BenchmarkLoopback$                   100000x  $COUNT"
	"Stages        ^BenchmarkLoopbackStages$             50000x   $COUNT"
	"Redis         ^BenchmarkPeersInterleaved$           20000x   $COUNT"
	"Settle        ^BenchmarkSettle(Memory|Redis)$       200000x  $COUNT"
	"GRPC          ^BenchmarkGRPCLoopback$               30000x   $COUNT"
)
start=$SECONDS
for g in "${groups[@]}"; do
	read -r name re bt count <<<"$g"
	[[ $name =~ $ONLY ]] || continue
	echo "== $name (-bench '$re' -benchtime $bt -count $count)" >&2
	t0=$SECONDS
	"$OUT/bench.test" -test.run '^$' -test.bench "$re" -test.benchtime "$bt" -test.count "$count" -test.timeout 60m |
		grep -E '^(Benchmark|goos|goarch|pkg|cpu|--- |\s+\S+_test\.go)' | tee -a "$raw" >&2
	echo "   $name took $((SECONDS - t0)) s" >&2
done
echo "# suite took $((SECONDS - start)) s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$raw"

go tool benchstat "$raw" >"$OUT/benchstat.txt" 2>&1 || true
go run ./cmd/benchtable "$raw" | tee "$OUT/table.md"
rm -f "$OUT/bench.test"
