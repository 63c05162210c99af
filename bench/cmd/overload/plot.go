package main

import (
	"fmt"
	"math"
	"strings"
)

// The plot's geometry: two panels, each w × h pixels of plot area, with
// margins for the axes.
const (
	plotW, plotH         = 800.0, 220.0
	marginL, marginR     = 60.0, 70.0
	marginTop, panelGap  = 40.0, 70.0
	plotFont             = `font-family="sans-serif" font-size="12"`
	colourLimit, colourP = "#1f5fbf", "#c0392b"
)

// svg plots the adaptive cap's limit (and the capacity) and the latency
// of the served requests, per second, for the adaptive run at 4×C and
// the run whose capacity halves: an SVG drawn from this run's data.
func (res *results) svg() string {
	var b strings.Builder
	height := marginTop + 2*plotH + panelGap + 70
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f">`+"\n", marginL+plotW+marginR, height, marginL+plotW+marginR, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	u := res.unloaded.run.window(1, res.unloaded.secs)
	bound := 2 * ms(u.quantile(0.99)) // the target: p99 at most twice the unloaded
	for i, sc := range []*scenario{res.adaptive, res.halving} {
		panel(&b, sc, marginTop+float64(i)*(plotH+panelGap), bound)
	}
	y := height - 35
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="2"/><text x="%.0f" y="%.0f" %s>adaptive limit (requests at once, left axis)</text>`+"\n", marginL, y-4, marginL+30, y-4, colourLimit, marginL+36, y, plotFont)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#888" stroke-dasharray="5,4"/><text x="%.0f" y="%.0f" %s>capacity</text>`+"\n", marginL+300, y-4, marginL+330, y-4, marginL+336, y, plotFont)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="2"/><text x="%.0f" y="%.0f" %s>p99 latency of served requests, per second (ms, right axis)</text>`+"\n", marginL+420, y-4, marginL+450, y-4, colourP, marginL+456, y, plotFont)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-dasharray="2,3"/><text x="%.0f" y="%.0f" %s>2 × the unloaded p99 (%.0f ms): the target</text>`+"\n", marginL, y+16, marginL+30, y+16, colourP, marginL+36, y+20, plotFont, bound)
	b.WriteString("</svg>\n")
	return b.String()
}

// panel draws one scenario's panel with its top at top, and the latency
// bound (ms) as a dotted line.
func panel(b *strings.Builder, sc *scenario, top, bound float64) {
	secs := float64(sc.secs)
	maxLimit := 16.0
	for _, r := range sc.reports {
		maxLimit = math.Max(maxLimit, float64(r.limit))
	}
	maxLimit = math.Ceil(maxLimit/8) * 8
	maxP := math.Max(60, bound)
	for s := range sc.secs {
		w := sc.run.window(s, s+1)
		maxP = math.Max(maxP, ms(w.quantile(0.99)))
	}
	maxP = math.Ceil(maxP/20) * 20 // ticks at quarters: whole multiples of 5 ms
	x := func(t float64) float64 { return marginL + t/secs*plotW }
	yl := func(v float64) float64 { return top + plotH - v/maxLimit*plotH }
	yp := func(v float64) float64 { return top + plotH - v/maxP*plotH }
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" %s font-weight="bold">%s: %.0f requests a second (4×C)</text>`+"\n", marginL, top-12, plotFont, sc.title(), sc.rate)
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", marginL, top, plotW, plotH)
	for i := 0; i <= 4; i++ {
		v := maxLimit * float64(i) / 4
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" %s text-anchor="end" fill="%s">%.0f</text>`+"\n", marginL-6, yl(v)+4, plotFont, colourLimit, v)
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" %s fill="%s">%.0f</text>`+"\n", marginL+plotW+6, yp(maxP*float64(i)/4)+4, plotFont, colourP, maxP*float64(i)/4)
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/>`+"\n", marginL, yl(v), marginL+plotW, yl(v))
	}
	for t := 0; t <= sc.secs; t += max(sc.secs/10, 1) {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" %s text-anchor="middle">%d s</text>`+"\n", x(float64(t)), top+plotH+16, plotFont, t)
	}
	var cap []string
	for t := 0.0; t <= secs; t += 0.1 {
		cap = append(cap, fmt.Sprintf("%.1f,%.1f", x(t), yl(float64(sc.capacityAt(t)))))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="#888" stroke-dasharray="5,4" points="%s"/>`+"\n", strings.Join(cap, " "))
	lim := []string{fmt.Sprintf("%.1f,%.1f", x(0), yl(2))}
	last := 2.0
	for _, r := range sc.reports {
		t := math.Min(r.t.Seconds(), secs)
		lim = append(lim, fmt.Sprintf("%.1f,%.1f", x(t), yl(last)), fmt.Sprintf("%.1f,%.1f", x(t), yl(float64(r.limit))))
		last = float64(r.limit)
	}
	lim = append(lim, fmt.Sprintf("%.1f,%.1f", x(secs), yl(last)))
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", colourLimit, strings.Join(lim, " "))
	var p99 []string
	for s := range sc.secs {
		w := sc.run.window(s, s+1)
		p99 = append(p99, fmt.Sprintf("%.1f,%.1f", x(float64(s)+0.5), yp(ms(w.quantile(0.99)))))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colourP, strings.Join(p99, " "))
	fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="%s" stroke-dasharray="2,3"/>`+"\n", marginL, yp(bound), marginL+plotW, yp(bound), colourP)
}

// title names a scenario in the plot.
func (sc *scenario) title() string {
	if len(sc.steps) == 0 {
		return "Adaptive cap, capacity 8"
	}
	return fmt.Sprintf("Adaptive cap, capacity 8 → 4 at %d s → 8 at %d s", sc.steps[0].at, sc.steps[1].at)
}
