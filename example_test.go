package ratekey_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey"
)

// serve sends one request from the load balancer 10.0.0.11 on behalf of
// the client 203.0.113.7, which forged the X-Forwarded-For entry it sent
// (the load balancer appends the address it saw), and prints what the
// client gets.
func serve(h http.Handler, path, forged string) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = "10.0.0.11:51234"
	req.Header.Set("X-Forwarded-For", forged+", 203.0.113.7")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Header().Get("RateLimit-Policy"))
	if w.Code != http.StatusOK {
		fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
		fmt.Print(w.Header().Get("Content-Type"), " ", w.Body.String())
	}
}

// A chi router limited per client network behind one load balancer: the
// client forges a new X-Forwarded-For on every request, and still spends
// one budget (2 requests, then 1 a minute).
func ExamplePerClient_chi() {
	r := chi.NewRouter()
	limit, err := ratekey.PerClient(r, "1/m", 2, "10.0.0.11") // 10.0.0.11: your load balancer
	if err != nil {
		log.Fatal(err)
	}
	r.Use(limit)
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "report") })

	for i, forged := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		serve(r, fmt.Sprintf("/v1/reports/%d", i), forged)
	}
	// Output:
	// 200 "per-client";r=1;t=60 "per-client";q=2;w=120
	// 200 "per-client";r=0;t=120 "per-client";q=2;w=120
	// 429 "per-client";r=0;t=120 "per-client";q=2;w=120
	// Retry-After: 60
	// application/problem+json {"type":"urn:ratekey:problem:rate-limited","title":"Rate limit exceeded","status":429,"detail":"policy per-client (burst 2, refill 1/m) has no room for this request; retry in 60 s","policy":"per-client","violated-policies":["per-client"]}
}

// The same limit on a Go 1.22+ http.ServeMux: the middleware wraps the
// mux it was given.
func ExamplePerClient_serveMux() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "report") })
	limit, err := ratekey.PerClient(mux, "1/m", 2, "10.0.0.11") // 10.0.0.11: your load balancer
	if err != nil {
		log.Fatal(err)
	}
	h := limit(mux) // http.ListenAndServe(addr, h)

	for i, forged := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		serve(h, fmt.Sprintf("/v1/reports/%d", i), forged)
	}
	// Output:
	// 200 "per-client";r=1;t=60 "per-client";q=2;w=120
	// 200 "per-client";r=0;t=120 "per-client";q=2;w=120
	// 429 "per-client";r=0;t=120 "per-client";q=2;w=120
	// Retry-After: 60
	// application/problem+json {"type":"urn:ratekey:problem:rate-limited","title":"Rate limit exceeded","status":429,"detail":"policy per-client (burst 2, refill 1/m) has no room for this request; retry in 60 s","policy":"per-client","violated-policies":["per-client"]}
}

var _ = strings.TrimSpace
