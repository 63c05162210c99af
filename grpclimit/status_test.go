package grpclimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekey/ratekey/grpclimit"
)

// TestRefusalTable: every problem type the chain answers with (middleware's
// problem.go; docs/compatibility.md's table) maps to the code, message and
// details of the package documentation's table; a body that is no ratekey
// problem (a Config.Deny's) maps by its HTTP status alone.
func TestRefusalTable(t *testing.T) {
	problem := func(typ string, status int, policy string, violated ...string) []byte {
		b, _ := json.Marshal(map[string]any{"type": "urn:ratekey:problem:" + typ, "title": "T", "status": status, "detail": "d", "policy": policy, "violated-policies": violated})
		return b
	}
	const info = " | ErrorInfo "
	for _, tc := range []struct {
		name   string
		status int
		retry  string
		body   []byte
		want   string
	}{
		{"rate-limited", 429, "7", problem("rate-limited", 429, "a", "a", "b"),
			"ResourceExhausted d" + info + "RATE_LIMITED ratekey type=urn:ratekey:problem:rate-limited policy=a | RetryInfo 7s | QuotaFailure policy:a a | QuotaFailure policy:b b"},
		{"rate-limited, the policy's status 503", 503, "7", problem("rate-limited", 503, "a", "a"),
			"ResourceExhausted d" + info + "RATE_LIMITED ratekey type=urn:ratekey:problem:rate-limited policy=a | RetryInfo 7s | QuotaFailure policy:a a"},
		{"cost-exceeds-burst", 429, "", problem("cost-exceeds-burst", 429, "a", "a"),
			"ResourceExhausted d" + info + "COST_EXCEEDS_BURST ratekey type=urn:ratekey:problem:cost-exceeds-burst policy=a | QuotaFailure policy:a a"},
		{"concurrency-limited", 429, "", problem("concurrency-limited", 429, "c", "c"),
			"ResourceExhausted d" + info + "CONCURRENCY_LIMITED ratekey type=urn:ratekey:problem:concurrency-limited policy=c | QuotaFailure policy:c c"},
		{"concurrency-limited with retry_after", 429, "2", problem("concurrency-limited", 429, "c", "c"),
			"ResourceExhausted d" + info + "CONCURRENCY_LIMITED ratekey type=urn:ratekey:problem:concurrency-limited policy=c | RetryInfo 2s | QuotaFailure policy:c c"},
		{"overloaded", 503, "1", problem("overloaded", 503, "work", "work"),
			"Unavailable d" + info + "OVERLOADED ratekey type=urn:ratekey:problem:overloaded policy=work | RetryInfo 1s"},
		{"delay-abandoned", 503, "", problem("delay-abandoned", 503, ""),
			"Unavailable d" + info + "DELAY_ABANDONED ratekey type=urn:ratekey:problem:delay-abandoned policy="},
		{"store-unavailable", 503, "1", problem("store-unavailable", 503, ""),
			"Unavailable d" + info + "STORE_UNAVAILABLE ratekey type=urn:ratekey:problem:store-unavailable policy= | RetryInfo 1s"},
		{"key-source-unavailable", 503, "5", problem("key-source-unavailable", 503, ""),
			"Unavailable d" + info + "KEY_SOURCE_UNAVAILABLE ratekey type=urn:ratekey:problem:key-source-unavailable policy= | RetryInfo 5s"},
		{"invalid-forwarding-chain", 400, "", problem("invalid-forwarding-chain", 400, ""),
			"InvalidArgument d" + info + "INVALID_FORWARDING_CHAIN ratekey type=urn:ratekey:problem:invalid-forwarding-chain policy="},
		{"invalid-forwarding-chain, unusable peer", 500, "", problem("invalid-forwarding-chain", 500, ""),
			"Internal d" + info + "INVALID_FORWARDING_CHAIN ratekey type=urn:ratekey:problem:invalid-forwarding-chain policy="},
		{"invalid-token", 401, "", problem("invalid-token", 401, ""),
			"Unauthenticated d" + info + "INVALID_TOKEN ratekey type=urn:ratekey:problem:invalid-token policy="},
		{"unauthenticated", 401, "", problem("unauthenticated", 401, ""),
			"Unauthenticated d" + info + "UNAUTHENTICATED ratekey type=urn:ratekey:problem:unauthenticated policy="},
		{"invalid-request", 400, "", problem("invalid-request", 400, ""),
			"InvalidArgument d" + info + "INVALID_REQUEST ratekey type=urn:ratekey:problem:invalid-request policy="},
		{"invalid-cost", 400, "", problem("invalid-cost", 400, "a"),
			"InvalidArgument d" + info + "INVALID_COST ratekey type=urn:ratekey:problem:invalid-cost policy=a"},
		{"missing-dimension, no principal", 401, "", problem("missing-dimension", 401, "a"),
			"Unauthenticated d" + info + "MISSING_DIMENSION ratekey type=urn:ratekey:problem:missing-dimension policy=a"},
		{"missing-dimension, a principal", 403, "", problem("missing-dimension", 403, "a"),
			"PermissionDenied d" + info + "MISSING_DIMENSION ratekey type=urn:ratekey:problem:missing-dimension policy=a"},
		{"missing-dimension, no network", 500, "", problem("missing-dimension", 500, "a"),
			"Internal d" + info + "MISSING_DIMENSION ratekey type=urn:ratekey:problem:missing-dimension policy=a"},
		{"a Deny body, 429", 429, "3", []byte("slow down"), "ResourceExhausted ratekey: refused with HTTP status 429 | RetryInfo 3s"},
		{"a Deny body, 418", 418, "", []byte(`{"type":"about:blank"}`), "Unknown ratekey: refused with HTTP status 418"},
		{"nothing written", 0, "", nil, "Unknown ratekey: refused with HTTP status 0"},
	} {
		h := http.Header{}
		if tc.retry != "" {
			h.Set("Retry-After", tc.retry)
		}
		if got := describe(grpclimit.Refusal(tc.status, h, tc.body)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// FuzzRefusal: whatever the chain's answer, a refusal is an error (never
// OK) whose code a ratekey problem type decides when there is one.
func FuzzRefusal(f *testing.F) {
	f.Add(429, "1", []byte(`{"type":"urn:ratekey:problem:rate-limited","detail":"d","policy":"p"}`))
	f.Add(503, "x", []byte(`{"type":"urn:ratekey:problem:overloaded"}`))
	f.Add(200, "", []byte("ok"))
	f.Fuzz(func(t *testing.T, httpStatus int, retry string, body []byte) {
		h := http.Header{"Retry-After": {retry}}
		err := grpclimit.Refusal(httpStatus, h, body)
		st, ok := status.FromError(err)
		if err == nil || !ok || st.Code() == codes.OK {
			t.Fatalf("Refusal(%d, %q, %q) = %v", httpStatus, retry, body, err)
		}
		var p struct{ Type string }
		if json.Unmarshal(body, &p) == nil && p.Type == "urn:ratekey:problem:rate-limited" && st.Code() != codes.ResourceExhausted {
			t.Fatalf("a rate-limited problem gave %v", st.Code())
		}
	})
}

// TestHeader: incoming metadata becomes header fields with canonical
// names, in order; binary ("-bin") keys and pseudo-headers are dropped,
// :authority is the host; the size counts every line.
func TestHeader(t *testing.T) {
	md := metadata.MD{
		"x-forwarded-for": {"198.51.100.7", "10.0.0.1"},
		"authorization":   {"Bearer t"},
		"forwarded":       {"for=198.51.100.9"},
		"trace-bin":       {"\x00\x01"},
		":authority":      {"api.example"},
		"x-custom_name":   {"v"},
	}
	h, host, size := grpclimit.Header(metadata.NewIncomingContext(context.Background(), md))
	want := http.Header{
		"X-Forwarded-For": {"198.51.100.7", "10.0.0.1"},
		"Authorization":   {"Bearer t"},
		"Forwarded":       {"for=198.51.100.9"},
		"X-Custom_name":   {"v"},
	}
	if len(h) != len(want) {
		t.Errorf("header %v, want %v", h, want)
	}
	for k, v := range want {
		if !slices.Equal(h[k], v) {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
	// 15+12+4, 15+8+4, 13+8+4, 9+16+4, 9+2+4, 10+11+4, 13+1+4
	if host != "api.example" || size != 31+27+25+29+15+25+18 {
		t.Errorf("host %q, size %d", host, size)
	}
	h, host, size = grpclimit.Header(context.Background())
	if len(h) != 0 || host != "" || size != 0 {
		t.Errorf("no metadata: %v, %q, %d", h, host, size)
	}
}

// FuzzHeader: every metadata key but a binary or pseudo one becomes the
// header field of its canonical name, its values unchanged.
func FuzzHeader(f *testing.F) {
	f.Add("x-forwarded-for", "198.51.100.7, 10.0.0.1", "authorization", "Bearer x")
	f.Add("grpc-trace-bin", "\x00", ":authority", "h")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		md := metadata.MD{}
		md[strings.ToLower(k1)] = append(md[strings.ToLower(k1)], v1)
		md[strings.ToLower(k2)] = append(md[strings.ToLower(k2)], v2)
		h, _, _ := grpclimit.Header(metadata.NewIncomingContext(context.Background(), md))
		for k, vs := range md {
			got, ok := h[http.CanonicalHeaderKey(k)]
			if dropped := strings.HasPrefix(k, ":") || strings.HasSuffix(k, "-bin"); dropped == ok || (ok && !slices.Equal(got, vs)) {
				t.Fatalf("metadata %q: %q → header %v", k, vs, h)
			}
		}
	})
}
