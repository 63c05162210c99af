package redistest

import (
	"strconv"
	"strings"
	"testing"
)

// ScriptCalls returns, from the text of INFO commandstats, the EVALSHA and
// EVAL calls a server has run (their calls fields summed) and how many of
// those failed (failed_calls: a NOSCRIPT answer, a script error).
func ScriptCalls(commandstats string) (calls, failed int64) {
	for line := range strings.Lines(commandstats) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for f := range strings.SplitSeq(stats, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "failed_calls":
				failed += n
			}
		}
	}
	return calls, failed
}

// ScriptCalls returns the EVALSHA and EVAL calls s has run, failed ones
// included (see the function ScriptCalls); it stops tb when s does not
// answer.
func (s *Server) ScriptCalls(tb testing.TB) int64 {
	tb.Helper()
	info, err := s.Do("INFO", "commandstats")
	if err != nil {
		tb.Fatal(err)
	}
	calls, _ := ScriptCalls(info)
	return calls
}
