package main

import (
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
)

// capConfig caps GET /v1/slow at 2 requests in flight per network, with a
// 1 s lease (so that the requests below outlive their lease: renewal).
const capConfig = `
listen: 127.0.0.1:0
trusted_proxies: {cidrs: []}
auth: {anonymous: allow}
policies:
  - {name: slow, key: [network], max_in_flight: 2, lease: 1s, operations: ["GET /v1/slow"]}
limiter:
  redis: {prefix: "cap:", timeout: 2s}
`

// TestTwoDemosShareOneCap: two demo processes on one Redis share one
// max_in_flight cap: of 6 concurrent 2.5 s requests of one network (3 per
// process), exactly 2 pass (each holding its slot past 2 leases) and 4 are
// refused; afterwards the slots are free again.
func TestTwoDemosShareOneCap(t *testing.T) {
	srv := redistest.Start(t)
	addrA, _, _ := startDemoProcess(t, t.TempDir(), capConfig, "-redis", srv.URL())
	addrB, _, _ := startDemoProcess(t, filepath.Join(t.TempDir()), capConfig, "-redis", srv.URL())
	get := func(addr, ms string) int {
		resp, err := http.Get("http://" + addr + "/v1/slow?ms=" + ms)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 6 {
		addr := addrA
		if i%2 == 1 {
			addr = addrB
		}
		wg.Go(func() {
			c := get(addr, "2500")
			mu.Lock()
			codes[c]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[200] != 2 || codes[429] != 4 {
		t.Errorf("6 concurrent slow requests on two demos: %v; want 2 × 200, 4 × 429", codes)
	}
	if d := time.Since(start); d < 2500*time.Millisecond {
		t.Errorf("the admitted requests took %v; want >= 2.5s", d)
	}
	for _, addr := range []string{addrA, addrB} {
		if c := get(addr, "0"); c != 200 {
			t.Errorf("after the slow requests: %d; want 200 (slots released)", c)
		}
	}
}
