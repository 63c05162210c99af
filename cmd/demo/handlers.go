package main

import (
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/identity"
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

func whoami(r *http.Request) map[string]any {
	out := map[string]any{}
	if c, ok := middleware.ClientFrom(r.Context()); ok {
		out["client"] = c.Client.String()
	}
	if p, ok := middleware.PrincipalFrom(r.Context()); ok && p.Method != identity.MethodAnonymous {
		out["principal"] = p
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
