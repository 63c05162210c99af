package middleware

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"go4.org/netipx"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/trustedproxy"
)

// DebugConfig configures [Debug].
type DebugConfig struct {
	// Resolver derives the client address, exactly as [ClientAddress] does. Required.
	Resolver *trustedproxy.Resolver
	// Authenticator verifies the credential exactly as [Authenticate] does;
	// nil shows no principal.
	Authenticator identity.Authenticator
	// Auth holds the options the live routes use with Authenticator.
	Auth AuthOptions
	// RateLimiter computes each policy's key and would-be decision without
	// spending budget; nil shows no policies.
	RateLimiter *RateLimiter
	// Limited reports whether the RateLimiter is mounted in front of the
	// route that serves r (r carries the described method and path). nil
	// means every route. Routes it excludes show "limited": false and no
	// policies, so the endpoint never claims a limit that does not apply.
	Limited func(r *http.Request) bool
	// Allow holds the admin networks. A request is answered only when its
	// derived client address is in Allow; when the derivation fails it is
	// answered only when the TCP peer is (a failure can only be produced by
	// a trusted peer or a client the chain recorded at a trusted address, see
	// README). Everyone else gets 404, as if the endpoint did not exist. nil
	// answers nobody.
	Allow *netipx.IPSet
}

// DebugView is the JSON the debug endpoint returns. Field names are a public
// contract. It never holds a token, signature, API key or other secret.
type DebugView struct {
	// Peer is the TCP peer as the server saw it (http.Request.RemoteAddr).
	Peer string `json:"peer"`
	// Client is the derived client address, null when the derivation failed.
	Client *string `json:"client"`
	// Network is the client's network key (address masked to the prefix), null on failure.
	Network *string `json:"network"`
	// Derivation explains how the client was chosen: header read, hops
	// walked with their verdicts, the reason, and the error if any.
	Derivation trustedproxy.Derivation `json:"derivation"`
	// Principal is the verified principal, null when none was established
	// (anonymous requests included: Authentication says "anonymous").
	Principal *identity.Principal `json:"principal"`
	// Authentication is the credential check's outcome.
	Authentication DebugAuthentication `json:"authentication"`
	// Operation is the request's operation (method and route template).
	Operation string `json:"operation"`
	// Limited is false when the rate limiter does not run for this route
	// (see DebugConfig.Limited); Policies is then empty.
	Limited bool `json:"limited"`
	// Policies holds each applicable policy's key and would-be decision.
	Policies []DebugPolicy `json:"policies"`
}

// DebugAuthentication is the outcome of the credential check in a [DebugView].
type DebugAuthentication struct {
	// Outcome is "verified", "anonymous", "missing" (no credential, anonymous
	// off), "invalid_request", "invalid_token", "unavailable" or "not_configured".
	Outcome string `json:"outcome"`
	// Status is the HTTP status a normal route would answer (0 when admitted).
	Status int `json:"status,omitempty"`
	// Detail is a fixed, secret-free description of a failure.
	Detail string `json:"detail,omitempty"`
}

// DebugPolicy is one policy's would-be decision in a [DebugView].
type DebugPolicy struct {
	// Name is the policy's name.
	Name string `json:"name"`
	// Key is the encoded key, null when a dimension is missing.
	Key *string `json:"key"`
	// Decision is PASSED, DELAYED, REJECTED, DELAYED_DRY_RUN,
	// REJECTED_DRY_RUN, SKIPPED or ERROR, computed without spending budget.
	Decision Decision `json:"decision"`
	// DryRun reports that the policy is accounted but not enforced.
	DryRun bool `json:"dry_run"`
	// Cost is the tokens the request would spend.
	Cost int64 `json:"cost"`
	// Rate and Burst restate the policy's limit ("5/s", tokens).
	Rate  string `json:"rate"`
	Burst int64  `json:"burst"`
	// Remaining is the whole tokens that would be left after this request
	// (or that are left now, when it would be rejected).
	Remaining int64 `json:"remaining"`
	// RetryAfterSeconds is the Retry-After a rejection would carry, null when
	// passed or never satisfiable.
	RetryAfterSeconds *int64 `json:"retry_after_seconds"`
	// DelayAfter is the tokens of the burst admitted without delay
	// (equal to burst for nodelay).
	DelayAfter int64 `json:"delay_after"`
	// DelaySeconds is how long the request would wait, for DELAYED and
	// DELAYED_DRY_RUN; null otherwise.
	DelaySeconds *float64 `json:"delay_seconds"`
	// SkippedReason names the missing dimension, null otherwise.
	SkippedReason *string `json:"skipped_reason"`
	// Error is a limiter failure, null otherwise.
	Error *string `json:"error"`
}

// Debug returns the handler of the operators' debug endpoint: for the request
// it receives, it shows the whole derivation (peer, client, network, hops,
// principal, operation) and each policy's key and would-be decision, without
// spending any budget. The optional query parameters "method" and "path"
// describe another request to compute the operation and policies for (GET
// /debug/ratekey?method=GET&path=/v1/reports/1). Mount it outside [ClientAddress] so that failed
// derivations can be shown. Safe for concurrent use.
func Debug(cfg DebugConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := cfg.Resolver.Resolve(r.RemoteAddr, r.Header)
		if !debugAllowed(cfg.Allow, res, err) {
			http.NotFound(w, r)
			return
		}
		view := DebugView{Peer: r.RemoteAddr, Derivation: res.Derivation, Policies: []DebugPolicy{}}
		ctx := r.Context()
		if err == nil {
			c, n := res.Client.String(), res.Network.String()
			view.Client, view.Network = &c, &n
			ctx = withClient(ctx, &res)
		}
		view.Authentication.Outcome = "not_configured"
		if cfg.Authenticator != nil {
			out := authenticate(cfg.Authenticator, cfg.Auth, r)
			view.Authentication = describeAuth(out)
			if out.principal != nil {
				ctx = withPrincipal(ctx, out.principal)
				if out.principal.Method != identity.MethodAnonymous {
					view.Principal = out.principal
				}
			}
		}
		described, ok := describedRequest(r.WithContext(ctx))
		if !ok {
			writeProblem(w, problem{Type: ProblemInvalidRequest, Status: http.StatusBadRequest,
				Detail: `the "path" parameter must be an absolute path such as /v1/reports/1`})
			return
		}
		if cfg.RateLimiter != nil {
			ev := cfg.RateLimiter.Check(described, false)
			view.Operation = ev.Operation
			view.Limited = cfg.Limited == nil || cfg.Limited(described)
			if view.Limited {
				for i := range ev.Policies {
					view.Policies = append(view.Policies, debugPolicy(&ev.Policies[i]))
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(view)
	})
}

// describedRequest applies the optional query parameters "method" and
// "path": the operation and policies are then computed as if the request
// had that method and path (peer, headers and credential stay the live
// request's). The path is routed, never used as a key.
// It reports false when path is not an absolute path.
func describedRequest(r *http.Request) (*http.Request, bool) {
	q := r.URL.Query()
	m, p := q.Get("method"), q.Get("path")
	if m == "" && p == "" {
		return r, true
	}
	r2 := r.Clone(r.Context())
	if m != "" {
		r2.Method = m
	}
	if p != "" {
		u, err := url.ParseRequestURI(p)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			return nil, false
		}
		r2.URL.Path, r2.URL.RawPath = u.Path, u.RawPath
	}
	return r2, true
}

func debugAllowed(allow *netipx.IPSet, res trustedproxy.Result, err error) bool {
	if allow == nil {
		return false
	}
	if err == nil {
		return allow.Contains(res.Client)
	}
	peer, perr := netip.ParseAddr(res.Derivation.Peer)
	return perr == nil && allow.Contains(peer.Unmap().WithZone(""))
}

func describeAuth(out authOutcome) DebugAuthentication {
	switch {
	case out.principal != nil && out.principal.Method == identity.MethodAnonymous:
		return DebugAuthentication{Outcome: "anonymous"}
	case out.principal != nil:
		return DebugAuthentication{Outcome: "verified"}
	case out.code != "":
		return DebugAuthentication{Outcome: out.code, Status: out.status, Detail: out.detail}
	case out.status == http.StatusServiceUnavailable:
		return DebugAuthentication{Outcome: "unavailable", Status: out.status, Detail: out.detail}
	}
	return DebugAuthentication{Outcome: "missing", Status: out.status, Detail: out.detail}
}

func debugPolicy(res *PolicyResult) DebugPolicy {
	d := DebugPolicy{Name: res.Policy, Decision: res.Decision, Cost: res.Cost, Rate: res.Limit.Rate.String(),
		Burst: res.Limit.Burst, Remaining: max(res.Remaining, 0)}
	if res.Key != "" {
		k := res.Key
		d.Key = &k
	}
	d.DryRun = res.DryRun
	d.DelayAfter = res.Limit.DelayAfter
	if d.DelayAfter == 0 {
		d.DelayAfter = res.Limit.Burst
	}
	if (res.Decision == DecisionRejected || res.Decision == DecisionRejectedDryRun) && res.Missing == "" && !res.Never {
		s := max(ceilSeconds(res.RetryAfter), 1)
		d.RetryAfterSeconds = &s
	}
	if res.Delay > 0 {
		s := res.Delay.Seconds()
		d.DelaySeconds = &s
	}
	if res.SkippedReason != "" {
		s := res.SkippedReason
		d.SkippedReason = &s
	}
	if res.Err != nil {
		s := safeError(res.Err)
		d.Error = &s
	}
	return d
}
