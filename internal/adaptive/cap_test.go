package adaptive

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestReserved(t *testing.T) {
	for _, tc := range []struct {
		limit, reserve, want int64
	}{
		{limit: 10, reserve: 200, want: 2},
		{limit: 9, reserve: 200, want: 2}, // 1.8
		{limit: 7, reserve: 200, want: 1}, // 1.4
		{limit: 2, reserve: 200, want: 0}, // 0.4
		{limit: 5, reserve: 100, want: 1}, // 0.5: halves up
		{limit: 1, reserve: 500, want: 1},
		{limit: 1000, reserve: 0, want: 0},
		{limit: MaxCeiling, reserve: 999, want: 999_000},
	} {
		s := Settings{Min: 1, Ceiling: MaxCeiling, Reserve: tc.reserve}
		if got := s.Reserved(tc.limit); got != tc.want {
			t.Errorf("Reserved(%d) at %d‰ = %d, want %d", tc.limit, tc.reserve, got, tc.want)
		}
	}
}

// TestAdmits pins who is admitted in which state: critical requests up
// to the limit; sheddable ones while their class holds fewer than the
// limit less the reserve less the critical slots needed lately; half the
// limit during a probe; the limit clamped to the settings' bounds.
func TestAdmits(t *testing.T) {
	s := Settings{Min: 2, Ceiling: 20, Reserve: 200}
	for _, tc := range []struct {
		name                string
		limit, held, crit   int64
		probe               bool
		peak                int64
		critical, sheddable bool
	}{
		{name: "empty", limit: 10, held: 0, critical: true, sheddable: true},
		// limit 10, reserve 2: sheddable up to 8 held by sheddable work.
		{name: "sheddable below the reserve", limit: 10, held: 7, critical: true, sheddable: true},
		{name: "sheddable at the reserve", limit: 10, held: 8, critical: true, sheddable: false},
		{name: "critical up to the limit", limit: 10, held: 9, critical: true, sheddable: false},
		{name: "full", limit: 10, held: 10, crit: 10, critical: false, sheddable: false},
		// 3 critical held now: sheddable hold 4, 4+2+3 = 9 < 10.
		{name: "critical held now", limit: 10, held: 7, crit: 3, critical: true, sheddable: true},
		{name: "critical held now, one more", limit: 10, held: 8, crit: 3, critical: true, sheddable: false},
		// critical work peaked at 5 lately: sheddable 3+2+5 = 10.
		{name: "critical peak lately", limit: 10, held: 4, crit: 1, peak: 5, critical: true, sheddable: false},
		{name: "critical peak lately, room", limit: 10, held: 3, crit: 1, peak: 5, critical: true, sheddable: true},
		// probe: sheddable base 5, less 2: 2 held by sheddable work.
		{name: "probe", limit: 10, held: 2, probe: true, critical: true, sheddable: true},
		{name: "probe full for sheddable", limit: 10, held: 3, probe: true, critical: true, sheddable: false},
		{name: "probe leaves critical the limit", limit: 10, held: 9, crit: 6, probe: true, critical: true, sheddable: false},
		// the word's limit 0 (never set) is Min; above the ceiling is it.
		{name: "unset limit is Min", limit: 0, held: 1, critical: true, sheddable: true}, // 20% of 2 rounds to 0
		{name: "unset limit is Min, full", limit: 0, held: 2, critical: false, sheddable: false},
		{name: "limit above the ceiling", limit: 40, held: 20, critical: false, sheddable: false},
		{name: "limit above the ceiling, room", limit: 40, held: 19, critical: true, sheddable: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, critical := range []bool{true, false} {
				// A cap of its own per class: a critical Acquire raises
				// the peak the sheddable one reads.
				c := &Cap{}
				c.word.Store(uint64(word(tc.held+tc.crit<<fieldBits).with(tc.limit, tc.probe)))
				c.peak.Store(tc.peak)
				c.peakAt.Store(c.Now()) // fresh peaks (see TestPeaksAge)
				want := tc.sheddable
				if critical {
					want = tc.critical
				}
				if ok, _, _ := c.Peek(&s, critical); ok != want {
					t.Errorf("Peek(critical %v) = %v, want %v", critical, ok, want)
				}
				ok, held, _ := c.Acquire(&s, critical)
				if ok != want {
					t.Errorf("Acquire(critical %v) = %v, want %v", critical, ok, want)
				}
				if ok {
					if held != tc.held+1 {
						t.Errorf("held after Acquire = %d, want %d", held, tc.held+1)
					}
					c.Release(&s, critical, false, 0, 0)
				}
				if w := word(c.word.Load()); w.held() != tc.held || w.critical() != tc.crit || w.limit() != tc.limit || w.probing() != tc.probe {
					t.Errorf("state after a release: held %d critical %d limit %d probe %v", w.held(), w.critical(), w.limit(), w.probing())
				}
			}
		})
	}
}

// TestWordFields pins the word's layout at its bounds: a limit update
// keeps the counts, and counts at MaxCeiling do not spill into the limit.
func TestWordFields(t *testing.T) {
	w := word(MaxCeiling+MaxCeiling<<fieldBits).with(MaxCeiling, true)
	if w.held() != MaxCeiling || w.critical() != MaxCeiling || w.limit() != MaxCeiling || !w.probing() {
		t.Fatalf("held %d critical %d limit %d probe %v", w.held(), w.critical(), w.limit(), w.probing())
	}
	w = w.with(7, false)
	if w.held() != MaxCeiling || w.critical() != MaxCeiling || w.limit() != 7 || w.probing() {
		t.Fatalf("after with(7, false): held %d critical %d limit %d probe %v", w.held(), w.critical(), w.limit(), w.probing())
	}
}

// TestPeaksAge: a burst of critical requests, long gone, stops keeping
// sheddable ones out even when no window closes (nothing is timed): a
// cap of 4 with no reserve, whose 4 critical requests have ended, refuses
// a sheddable request until the peaks are 1 s old (no window has closed
// yet), then admits it; with a window's median of 20 ms known, they count
// for 8 medians, 160 ms. Without the ageing, every sheddable request
// would be refused for as long as no 16 timed requests end in a window.
func TestPeaksAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := Settings{Min: 4, Ceiling: 4}
		for _, tc := range []struct {
			latency time.Duration
			age     time.Duration
		}{{0, time.Second}, {20 * time.Millisecond, 160 * time.Millisecond}} {
			c := New()
			c.latency.Store(int64(tc.latency))
			c.peakAt.Store(c.Now())
			for range 4 {
				if ok, _, _ := c.Acquire(&s, true); !ok {
					t.Fatal("a critical request refused by an empty cap")
				}
			}
			for range 4 {
				c.Release(&s, true, false, 0, 0)
			}
			time.Sleep(tc.age - time.Millisecond)
			if ok, _, _ := c.Peek(&s, false); ok {
				t.Errorf("latency %v: a sheddable request admitted %v after the burst; want refused until %v", tc.latency, tc.age-time.Millisecond, tc.age)
			}
			if ok, _, _ := c.Acquire(&s, false); ok {
				t.Errorf("latency %v: Acquire admitted a sheddable request %v after the burst", tc.latency, tc.age-time.Millisecond)
			}
			time.Sleep(time.Millisecond)
			if ok, held, _ := c.Acquire(&s, false); !ok || held != 1 {
				t.Errorf("latency %v: Acquire at %v = %v, %d held; want admitted, 1 held", tc.latency, tc.age, ok, held)
			}
		}
	})
}
