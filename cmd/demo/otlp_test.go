package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// otlpConfig is a demo config whose metrics go to an OTLP collector;
// %s is the metrics section's extra lines.
const otlpConfig = `
listen: 127.0.0.1:0
auth:
  anonymous: allow
policies:
  - name: per-network
    key: [network]
    rate: 1/m
    burst: 1
metrics:
  enabled: true
  exporter: otlp
%s
limiter:
  store: memory
`

// collector is an OTLP/HTTP metrics receiver: it keeps each export's
// path, content type and decoded body.
type collector struct {
	mu      sync.Mutex
	exports []string // "POST /v1/metrics application/x-protobuf"
	points  []string // "name unit {attributes} value" of the sums, "name unit {attributes} count N" of the histograms
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req colmetrics.ExportMetricsServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports = append(c.exports, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				for _, p := range m.GetSum().GetDataPoints() {
					c.points = append(c.points, fmt.Sprintf("%s %s %s %d", m.GetName(), m.GetUnit(), otlpAttrs(p.GetAttributes()), p.GetAsInt()))
				}
				for _, p := range m.GetHistogram().GetDataPoints() {
					c.points = append(c.points, fmt.Sprintf("%s %s %s count %d", m.GetName(), m.GetUnit(), otlpAttrs(p.GetAttributes()), p.GetCount()))
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil) // an empty ExportMetricsServiceResponse: all accepted
}

// otlpAttrs prints OTLP attributes as {k=v,...}, sorted.
func otlpAttrs(kvs []*commonpb.KeyValue) string {
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.GetKey()+"="+kv.GetValue().GetStringValue())
	}
	slices.Sort(out)
	return "{" + strings.Join(out, ",") + "}"
}

// TestOTLPExport: with metrics.exporter otlp, the demo serves no /metrics
// and, when it stops, pushes ratekey's instruments over OTLP/HTTP
// (protobuf, POST /v1/metrics) to metrics.endpoint, or to the standard
// OTEL_EXPORTER_OTLP_ENDPOINT when the config names none: one PASSED and
// one REJECTED request, and their store calls, arrive at a real receiver.
func TestOTLPExport(t *testing.T) {
	for _, tc := range []struct {
		name string
		// endpoint returns the metrics section's endpoint line for the
		// collector's URL, after setting any environment.
		endpoint func(t *testing.T, url string) string
	}{
		{"metrics.endpoint without a path", func(_ *testing.T, url string) string { return "  endpoint: " + url }},
		{"metrics.endpoint with the path", func(_ *testing.T, url string) string { return "  endpoint: " + url + "/v1/metrics" }},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", func(t *testing.T, url string) string {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			col := &collector{}
			srv := httptest.NewServer(col)
			defer srv.Close()
			path := writeConfig(t, fmt.Sprintf(otlpConfig, tc.endpoint(t, srv.URL)))
			cfg, err := loadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			a, err := build(cfg, discardLogger(), nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := newServer(path, discardLogger(), a)
			if err != nil {
				t.Fatal(err)
			}
			var codes []int
			for _, target := range []string{"/v1/reports/1", "/v1/reports/2", "/metrics"} {
				codes = append(codes, call(s, "192.0.2.1:1000", target, nil).Code)
			}
			if want := []int{200, 429, 404}; !slices.Equal(codes, want) {
				t.Errorf("statuses %v; want %v (no /metrics: the otlp exporter serves nothing)", codes, want)
			}
			s.close() // pushes what is left

			col.mu.Lock()
			defer col.mu.Unlock()
			if want := []string{"POST /v1/metrics application/x-protobuf"}; !slices.Equal(col.exports, want) {
				t.Errorf("exports %q; want %q", col.exports, want)
			}
			slices.Sort(col.points)
			want := []string{
				"ratekey.requests {request} {ratekey.decision=PASSED,ratekey.policy=per-network} 1",
				"ratekey.requests {request} {ratekey.decision=REJECTED,ratekey.policy=per-network} 1",
				"ratekey.store.call.duration s {ratekey.store.operation=take,ratekey.store=memory} count 2",
			}
			if !slices.Equal(col.points, want) {
				t.Errorf("points:\n%s\nwant:\n%s", strings.Join(col.points, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestCheckMetricsExporter: demo check accepts prometheus (the default,
// or named) and otlp, and refuses an unknown exporter and a field of the
// other exporter, naming the field; an endpoint with credentials is
// refused without being printed.
func TestCheckMetricsExporter(t *testing.T) {
	base := strings.Replace(otlpConfig, "  exporter: otlp\n", "", 1)
	for _, tc := range []struct {
		name    string
		section string // the metrics section's lines after enabled: true
		want    string // "" for a valid config
	}{
		{"prometheus, the default", "  allow: [127.0.0.1]", ""},
		{"prometheus, named", "  exporter: prometheus\n  allow: [127.0.0.1]", ""},
		{"otlp, the exporter's default endpoint", "  exporter: otlp", ""},
		{"otlp, an endpoint", "  exporter: otlp\n  endpoint: https://collector.example:4318", ""},
		{"unknown exporter", "  exporter: otel\n  allow: [127.0.0.1]",
			`metrics.exporter: "otel" is not an exporter; use prometheus (the default: served on metrics.path) or otlp (pushed to metrics.endpoint)`},
		{"prometheus with an endpoint", "  allow: [127.0.0.1]\n  endpoint: http://collector:4318",
			"metrics.endpoint: only for exporter otlp (the prometheus exporter serves metrics.path)"},
		{"otlp with allow", "  exporter: otlp\n  allow: [127.0.0.1]",
			"metrics.allow: only for exporter prometheus (the otlp exporter pushes to metrics.endpoint and serves nothing)"},
		{"otlp with a path", "  exporter: otlp\n  path: /metrics",
			"metrics.path: only for exporter prometheus (the otlp exporter pushes to metrics.endpoint and serves nothing)"},
		{"otlp, not http", "  exporter: otlp\n  endpoint: grpc://collector:4317",
			"metrics.endpoint: want an http:// or https:// URL with a host, such as http://collector:4318/v1/metrics"},
		{"otlp, no host", "  exporter: otlp\n  endpoint: collector:4318",
			"metrics.endpoint: want an http:// or https:// URL with a host, such as http://collector:4318/v1/metrics"},
		{"otlp, credentials", "  exporter: otlp\n  endpoint: https://ops:hunter2@collector:4318",
			"metrics.endpoint: credentials in the URL are refused (they would reach logs); set OTEL_EXPORTER_OTLP_HEADERS instead"},
		{"otlp, a query", "  exporter: otlp\n  endpoint: http://collector:4318/v1/metrics?token=x",
			"metrics.endpoint: a query or fragment is not part of an OTLP endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runDemo(t, "check", "-config", writeConfig(t, fmt.Sprintf(base, tc.section)))
			if tc.want == "" {
				if code != 0 || !strings.Contains(out, "is valid") {
					t.Errorf("check: %d %q %q; want valid", code, out, errOut)
				}
				return
			}
			lines := strings.Count(errOut, "\n  - ")
			if code != 1 || !strings.Contains(errOut, "\n  - "+tc.want+"\n") || lines != 1 {
				t.Errorf("check: %d, %d errors:\n%s\nwant the one error:\n%s", code, lines, errOut, tc.want)
			}
			if strings.Contains(errOut, "hunter2") {
				t.Errorf("the error prints the endpoint's password:\n%s", errOut)
			}
		})
	}
}

// TestReloadMetricsExporter: a reload that would turn the OTLP push on or
// off, or move it, is refused, as a store change is: the metrics live as
// long as the process; the running config (and /metrics) stays.
func TestReloadMetricsExporter(t *testing.T) {
	prom := strings.Replace(otlpConfig, "  exporter: otlp\n%s", "  allow: [192.0.2.0/24]", 1)
	otlp := func(endpoint string) string { return strings.Replace(otlpConfig, "%s", "  endpoint: "+endpoint, 1) }
	for _, tc := range []struct {
		name, from, to string
	}{
		{"prometheus to otlp", prom, otlp("http://127.0.0.1:9")},
		{"otlp to prometheus", otlp("http://127.0.0.1:9"), prom},
		{"otlp to another endpoint", otlp("http://127.0.0.1:9"), otlp("http://127.0.0.2:9")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, path, logs := reloadServer(t, tc.from)
			defer s.close()
			before := call(s, "192.0.2.1:1000", "/metrics", nil).Code
			if err := os.WriteFile(path, []byte(tc.to), 0o600); err != nil {
				t.Fatal(err)
			}
			want := "metrics: the otlp exporter was turned on or off or its endpoint changed; a reload keeps the running metrics, so restart the demo to apply it"
			if err := s.reload(); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(logs.String(), "ratekey reload refused") {
				t.Errorf("reload: %v; want %q, logged", err, want)
			}
			if after := call(s, "192.0.2.1:1000", "/metrics", nil).Code; after != before {
				t.Errorf("/metrics: %d before the refused reload, %d after", before, after)
			}
		})
	}
}
