package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// target is one of issue 29's targets with this run's figure.
type target struct {
	name, figure string
	pass         bool
}

// settledFrom is the second from which a run is read as settled (a third
// of it: 10 s of 30).
func settledFrom(sc *scenario) int { return sc.secs / 3 }

// targets reads issue 29's targets off the run.
func (res *results) targets() []target {
	u := res.unloaded.run.window(1, res.unloaded.secs)
	p50u, p99u := u.quantile(0.5), u.quantile(0.99)
	a := res.adaptive
	from := settledFrom(a)
	aw := a.run.window(from, a.secs)
	settle := a.settled(0, a.secs, 0.75*capacity, 1.25*capacity)
	var bestGood float64
	best := res.sweep[0]
	for _, sc := range res.sweep {
		from := sc.secs / 4
		if g := sc.run.window(from, sc.secs); g.goodput(sc.secs-from) > bestGood {
			best, bestGood = sc, g.goodput(sc.secs-from)
		}
	}
	good := aw.goodput(a.secs - from)
	h := res.halving.secs / 3
	down := res.halving.settled(h, 2*h, 0.75*capacity/2, 1.25*capacity/2)
	up := res.halving.settled(2*h, 3*h, 0.75*capacity, 1.25*capacity)
	n := res.nolimit
	first, last := n.run.window(0, 1), n.run.window(n.secs-1, n.secs)
	fixed4x := res.sweep[len(res.sweep)-1]
	f4 := fixed4x.run.window(fixed4x.secs/4, fixed4x.secs)
	p := res.prio[0].run.window(0, res.prio[0].secs)
	crit := float64(p.served[critical]) / float64(p.offered[critical])
	shedRefused := float64(p.refused[sheddable]) / float64(max(p.refused[sheddable]+p.refused[critical], 1))
	p3 := res.prio[1].run.window(0, res.prio[1].secs)
	return []target{
		{"adaptive cap within ±25% of C = 8 (6 to 10) within 10 s, at 4×C", fmt.Sprintf("every second's median limit within 6..10 from second %d on; seconds %d-%d: %s; every window's limit within 6..10 from %s", settle, from, a.secs, a.limitText(from, a.secs), durText(a.settledAt(0, a.secs, 6, 10))), settle >= 0 && settle <= 10},
		{"goodput ≥ 90% of the best fixed cap of the sweep", fmt.Sprintf("%.0f/s vs %.0f/s (%s): %.1f%%", good, bestGood, best.name, 100*good/bestGood), good >= 0.9*bestGood},
		{"p99 ≤ 2× the unloaded latency", fmt.Sprintf("p99 %.1f ms (p50 %.1f ms) vs unloaded p99 %.1f ms, p50 %.1f ms: %.2f× the unloaded p99, %.2f× its p50", ms(aw.quantile(0.99)), ms(aw.quantile(0.5)), ms(p99u), ms(p50u), float64(aw.quantile(0.99))/float64(p99u), float64(aw.quantile(0.99))/float64(p50u)), aw.quantile(0.99) <= 2*p99u},
		{"without ratekey, p99 grows without bound", fmt.Sprintf("p99 %.0f ms in second 1, %.0f ms in second %d (the queue grows by 3×C a second for as long as the load lasts)", ms(first.quantile(0.99)), ms(last.quantile(0.99)), n.secs), last.quantile(0.99) > 3*first.quantile(0.99)},
		{"a fixed cap at 4×C (32) holds a queue of 3×C", fmt.Sprintf("p99 %.1f ms: about 4× the unloaded, bounded by the cap (not without bound), goodput %.0f/s", ms(f4.quantile(0.99)), f4.goodput(fixed4x.secs-fixed4x.secs/4)), f4.quantile(0.99) > 2*p99u},
		{"capacity halves mid-run: the cap follows within 10 s", fmt.Sprintf("median limit within ±25%% of 4 (3..5) from %d s after the loss (%s); back within 6..10 %d s after the recovery (%s)", down, res.halving.limitText(h+down, 2*h), up, res.halving.limitText(2*h+up, 3*h)), down >= 0 && down <= 10 && up >= 0 && up <= 10},
		{"30% critical, 20% reserved, overload: ≥ 99% of critical requests succeed", fmt.Sprintf("at 2×C: critical %.2f%%, sheddable %.1f%%, sheddable take %.1f%% of the refusals; at 3×C: critical %.2f%%, sheddable %.1f%%", 100*crit, 100*float64(p.served[sheddable])/float64(p.offered[sheddable]), 100*shedRefused, 100*float64(p3.served[critical])/float64(p3.offered[critical]), 100*float64(p3.served[sheddable])/float64(p3.offered[sheddable])), crit >= 0.99},
	}
}

// loadAverage returns the 1, 5 and 15 minute load averages ("?" where
// /proc/loadavg is not).
func loadAverage() string {
	load, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(load))
	if err != nil || len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// durText writes a time from a reference point, or "never" for -1.
func durText(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(100 * time.Millisecond).String()
}

// write writes report.md, timeline.csv and overload.svg to dir, and the
// report to w.
func (res *results) write(dir string, w io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	res.markdown(&b)
	fmt.Fprint(w, b.String())
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "timeline.csv"), []byte(res.csv()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "overload.svg"), []byte(res.svg()), 0o644)
}

// markdown writes the report: the machine, the targets, and each
// scenario's table.
func (res *results) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "# Overload run (issue 29)\n\nStarted %s, %d cores, %s; load average %s at the start, %s at the end\n\n",
		res.started.UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version(), res.loadStart, loadAverage())
	fmt.Fprintf(b, "Resource: %d requests at once, %v each, first come first served. 4×C = %.0f requests a second.\n\n", capacity, unit, 4*capacity/unit.Seconds())
	b.WriteString("| target | this run | |\n| --- | --- | --- |\n")
	for _, t := range res.targets() {
		verdict := "PASS"
		if !t.pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", t.name, t.figure, verdict)
	}
	b.WriteString("\n## Every scenario (whole run)\n\n| scenario | load | seconds | goodput, p50, p99, refused, limit |\n| --- | --- | --- | --- |\n")
	all := append([]*scenario{res.unloaded, res.adaptive}, res.sweep...)
	all = append(append(all, res.nolimit, res.halving), res.prio...)
	for _, sc := range all {
		fmt.Fprintf(b, "| %s | %.0f/s (%.2g×C) | %d | %s |\n", sc.name, sc.rate, sc.rate*unit.Seconds()/capacity, sc.secs, sc.summary(0, sc.secs))
	}
	for _, sc := range []*scenario{res.adaptive, res.halving, res.nolimit} {
		fmt.Fprintf(b, "\n## %s, second by second\n\n| s | capacity | offered | served | refused | p50 ms | p99 ms | limit (median, range) |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n", sc.name)
		for s := range sc.secs {
			w := sc.run.window(s, s+1)
			lim := "-"
			if len(sc.reports) > 0 {
				ls := sc.secondLimits(s)
				lim = fmt.Sprintf("%d (%d..%d)", ls[10], ls[0], ls[19])
			}
			fmt.Fprintf(b, "| %d | %d | %d | %d | %d | %.1f | %.1f | %s |\n", s, sc.capacityAt(float64(s)), w.offered[0]+w.offered[1], w.served[0]+w.served[1], w.refused[0]+w.refused[1], ms(w.quantile(0.5)), ms(w.quantile(0.99)), lim)
		}
	}
}

// csv returns every second of every scenario and every limit report.
func (res *results) csv() string {
	var b strings.Builder
	b.WriteString("scenario,kind,t_s,offered,served,refused,p50_ms,p99_ms,limit,baseline_ms,latency_ms\n")
	all := append([]*scenario{res.unloaded, res.adaptive}, res.sweep...)
	all = append(append(all, res.nolimit, res.halving), res.prio...)
	for _, sc := range all {
		for s := range sc.secs {
			w := sc.run.window(s, s+1)
			fmt.Fprintf(&b, "%s,second,%d,%d,%d,%d,%.2f,%.2f,,,\n", sc.name, s, w.offered[0]+w.offered[1], w.served[0]+w.served[1], w.refused[0]+w.refused[1], ms(w.quantile(0.5)), ms(w.quantile(0.99)))
		}
		for _, r := range sc.reports {
			fmt.Fprintf(&b, "%s,report,%.3f,,,,,,%d,%.2f,%.2f\n", sc.name, r.t.Seconds(), r.limit, ms(r.baseline), ms(r.latency))
		}
	}
	return b.String()
}
