package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/internal/workload"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
)

// getReport serves GET /v1/reports/{id}: it echoes whose budget the request
// spent so that a person trying the demo sees the derivation at work.
func getReport(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"id":     chi.URLParam(r, "id"),
		"served": whoami(r),
	})
}

// postExport serves POST /v1/export.
func postExport(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusAccepted, map[string]any{
		"export": "queued",
		"served": whoami(r),
	})
}

// maxSlow is the longest GET /v1/slow sleeps, in milliseconds.
const maxSlow = 10_000

// getSlow serves GET /v1/slow?ms=N: it sleeps N milliseconds (0 to 10 000;
// anything else is 400), or until the client goes away, and answers 200;
// the default config's in-flight policy (slow) caps how many of one client
// network's run at once.
func getSlow(w http.ResponseWriter, r *http.Request) {
	ms := 0
	if v := r.URL.Query().Get("ms"); v != "" || r.URL.Query().Has("ms") {
		n, err := digits(v)
		if err != nil || n < 0 || n > maxSlow || len(v) > 5 || len(r.URL.Query()["ms"]) > 1 {
			writeBadRequest(w, "ms must be one whole number of milliseconds from 0 to 10000")
			return
		}
		ms = n
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return // nobody is listening
	}
	writeJSON(w, http.StatusOK, map[string]any{"slept_ms": ms, "served": whoami(r)})
}

// maxTokens is the most tokens POST /v1/complete reports.
const maxTokens = 100_000

// postComplete serves POST /v1/complete?tokens=N, a stand-in for an LLM
// proxy: it answers as if the upstream model had used N tokens (0 to
// 100 000; anything else, or N given twice, is a 400 problem, which
// reports 0: nothing was used) and reports
// N to every settling policy of the request (middleware.ReportCost with
// policy ""), which replace their reservations by it once it returns. A
// real proxy reads N from the upstream's response (its usage). Without a
// settling policy on the route, the response says so under "settle".
func postComplete(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := q.Get("tokens")
	n, err := digits(v)
	if err != nil || n < 0 || n > maxTokens || len(v) > 6 || len(q["tokens"]) != 1 {
		// No tokens were used: the reservations come back whole.
		_ = middleware.ReportCost(r.Context(), "", 0)
		writeBadRequest(w, "tokens must be one whole number of tokens from 0 to 100000")
		return
	}
	out := map[string]any{"usage": map[string]int{"total_tokens": n}, "served": whoami(r)}
	if err := middleware.ReportCost(r.Context(), "", int64(n)); err != nil {
		out["settle"] = err.Error()
	}
	writeJSON(w, http.StatusOK, out)
}

// writeBadRequest answers 400 with an RFC 9457 problem (type about:blank:
// the status says it all) whose detail is detail.
func writeBadRequest(w http.ResponseWriter, detail string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Bad Request", "status": http.StatusBadRequest, "detail": detail})
}

// GET /v1/work's resource: 8 requests served at once, 20 ms per unit of
// work, first come first served, with a queue of at most 1000.
const (
	workCapacity = 8
	workUnit     = 20 * time.Millisecond
	workQueue    = 1000
	maxUnits     = 100
)

// getWork serves GET /v1/work?units=N (1 to 100, default 1): it runs N
// units of work on the demo's resource of fixed capacity (workCapacity at
// once; beyond that, requests queue and their latency grows) and answers
// 200, or 503 when the resource's own queue is full (the default config's
// adaptive cap, work, keeps requests from queueing that far).
func (a *app) getWork(w http.ResponseWriter, r *http.Request) {
	units := 1
	if v := r.URL.Query().Get("units"); v != "" || r.URL.Query().Has("units") {
		n, err := digits(v)
		if err != nil || n < 1 || n > maxUnits || len(v) > 3 || len(r.URL.Query()["units"]) > 1 {
			writeBadRequest(w, "units must be one whole number from 1 to 100")
			return
		}
		units = n
	}
	start := time.Now()
	switch err := a.work.Work(r.Context(), units); {
	case errors.Is(err, workload.ErrQueueFull):
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "the resource's queue is full"})
	case err != nil:
		return // the client went away
	default:
		writeJSON(w, http.StatusOK, map[string]any{"units": units, "ms": time.Since(start).Milliseconds(), "served": whoami(r)})
	}
}

func whoami(r *http.Request) map[string]any { return whoamiOf(r.Context()) }

// whoamiOf describes whose budget the request or gRPC call of ctx spent:
// its client and, when verified, its principal.
func whoamiOf(ctx context.Context) map[string]any {
	out := map[string]any{}
	if c, ok := middleware.ClientFrom(ctx); ok {
		out["client"] = c.Client.String()
	}
	if p, ok := middleware.PrincipalFrom(ctx); ok && p.Method != limitkey.MethodAnonymous {
		out["principal"] = p
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// digits parses v as a whole number written in ASCII digits only (no sign,
// no spaces; strconv.Atoi alone also takes "+7" and "-0"), at most 9 of
// them.
func digits(v string) (int, error) {
	if v == "" || len(v) > 9 || strings.ContainsFunc(v, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, strconv.ErrSyntax
	}
	return strconv.Atoi(v)
}
