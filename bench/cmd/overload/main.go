// Command overload drives the demo's GET /v1/work (a resource of 8
// requests at once, 20 ms each; more queue) past saturation and reports
// goodput, latency and the adaptive cap's limit over time: the figures of
// issue 29 in BENCHMARKS.md and the plot linked from docs/operating.md.
//
//	go run ./cmd/overload                 # every scenario, in this process (about 4 minutes)
//	go run ./cmd/overload -quick          # every scenario, short (a smoke test; figures mean nothing)
//	go run ./cmd/overload -url http://127.0.0.1:8080   # a running demo, 2x its capacity for 30 s
//
// In this process, the stack is ratekey.New (a JWT authenticator whose
// tokens carry a plan, and one policy: the demo's adaptive cap, a fixed
// cap, or none) in front of internal/workload's resource, called through
// its http.Handler: no sockets, so the machine's network stack adds no
// noise. Requests are due at a fixed rate (open loop: a slow answer does
// not slow the load), and latency is timed from the instant each was due.
// The scenarios, in one run: unloaded (a quarter of the capacity),
// adaptive at 4x, a sweep of fixed caps at 4x, no cap at 4x, adaptive at
// 4x while the capacity halves and comes back, and priorities (30%
// critical, 20% reserved) at 2x and 3x. Results go to -out: report.md
// (the tables and the targets), timeline.csv (every second, and every
// limit report) and overload.svg (the limit and latency over time).
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	quick := flag.Bool("quick", false, "every scenario, short: a smoke test whose figures mean nothing")
	out := flag.String("out", "results/overload", "directory for report.md, timeline.csv and overload.svg")
	url := flag.String("url", "", "drive a running demo's GET /v1/work at -rate for -duration (e.g. http://127.0.0.1:8080) instead")
	rate := flag.Float64("rate", 2*capacity/unit.Seconds(), "with -url: requests a second (the default, 2x the demo's capacity: over loopback HTTP the driver and the demo share the machine's cores)")
	dur := flag.Duration("duration", 30*time.Second, "with -url: how long")
	token := flag.String("token", "", "with -url: a bearer token sent with 30% of the requests (critical under the default config: demo token -sub alice)")
	flag.Parse()
	if *url != "" {
		if err := remote(*url, *rate, *dur, *token); err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
		return
	}
	scale := 1.0
	if *quick {
		scale = 0.15
	}
	res, err := runAll(scale)
	if err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
	if err := res.write(*out, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}
