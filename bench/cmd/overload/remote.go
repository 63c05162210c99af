package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// remote drives a running demo's GET /v1/work at rate for d over HTTP,
// each request from another client address (X-Forwarded-For, which the
// embedded default's loopback proxy rule reads: its per-network policy
// would otherwise refuse one client beyond 5 a second), a share of 30%
// with the bearer token when one is given. It prints, each second, what
// the requests due in it saw and the adaptive limit the demo's /metrics
// reported.
func remote(base string, rate float64, d time.Duration, token string) error {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	limits := &scraped{}
	stop := make(chan struct{})
	go limits.poll(client, base+"/metrics", stop)
	share := 0.0
	if token != "" {
		share = 0.3
	}
	do := func(ctx context.Context, class int) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/work", nil)
		if err != nil {
			return 0
		}
		a := netip.AddrFrom4([4]byte{198, 18, byte(rand.IntN(256)), byte(rand.IntN(256))})
		req.Header.Set("X-Forwarded-For", a.String())
		if class == critical {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	r := drive(do, rate, d, share, 1<<14)
	close(stop)
	fmt.Printf("%3s %8s %7s %7s %7s %8s %8s %6s\n", "s", "offered", "served", "refused", "other", "p50 ms", "p99 ms", "limit")
	for s := range r.seconds {
		w := r.window(s, s+1)
		fmt.Printf("%3d %8d %7d %7d %7d %8.1f %8.1f %6s\n", s, w.offered[0]+w.offered[1], w.served[0]+w.served[1], w.refused[0]+w.refused[1], w.other, ms(w.quantile(0.5)), ms(w.quantile(0.99)), limits.at(r.start.Add(time.Duration(s)*time.Second+time.Second/2)))
	}
	return nil
}

// scraped is the adaptive limit /metrics reported, over time.
type scraped struct {
	mu     sync.Mutex
	times  []time.Time
	limits []string
}

// poll reads /metrics every 250 ms until stop.
func (s *scraped) poll(client *http.Client, url string, stop chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		resp, err := client.Get(url)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), `ratekey_adaptive_limit{operation="",policy="work"} `); ok {
				if _, err := strconv.ParseFloat(v, 64); err == nil {
					s.mu.Lock()
					s.times, s.limits = append(s.times, time.Now()), append(s.limits, v)
					s.mu.Unlock()
				}
			}
		}
		resp.Body.Close()
	}
}

// at returns the last limit read before t, or "-".
func (s *scraped) at(t time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := "-"
	for i, ti := range s.times {
		if ti.After(t) {
			break
		}
		v = s.limits[i]
	}
	return v
}
