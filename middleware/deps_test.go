package middleware_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// goList runs go list -f {{.ImportPath}} args in the module root and
// returns the import paths it prints.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH (go test puts GOROOT/bin first on it): %v", err)
	}
	cmd := exec.Command(goCmd, append([]string{"list", "-f", "{{.ImportPath}}"}, args...)...)
	cmd.Dir = ".." // the module root
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Fields(string(out))
}

// TestNoForcedPrometheus: the library reaches metrics through
// middleware.Metrics, so no package of the module but metrics itself (and
// the demo, a program) depends on github.com/prometheus: not the root
// package, not middleware, identity, trustedproxy or limiter, nor anything
// they import, nor otelmetrics (the OpenTelemetry implementation). Only a
// program that imports package metrics does.
func TestNoForcedPrometheus(t *testing.T) {
	const module = "github.com/ratekey/ratekey"
	var library []string
	for _, p := range goList(t, "./...") {
		// Programs (the demo, the docs' complete program) may import it.
		if p != module+"/metrics" && !strings.HasPrefix(p, module+"/cmd/") && !strings.HasPrefix(p, module+"/docs/") {
			library = append(library, p)
		}
	}
	for _, want := range []string{"/middleware", "/identity", "/trustedproxy", "/limiter", "/otelmetrics"} {
		if !slices.Contains(library, module+want) {
			t.Fatalf("go list ./... lists no %s%s: %v", module, want, library)
		}
	}
	deps := goList(t, append([]string{"-deps"}, library...)...)
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/prometheus/") || d == module+"/metrics" {
			t.Errorf("the library imports %s: metrics must reach it through middleware.Metrics only", d)
		}
	}
	if !slices.Contains(deps, "net/http") {
		t.Fatalf("go list -deps lists no net/http: %v", deps)
	}
}

// TestNoForcedOpenTelemetryOrGRPC: the root package, middleware and the
// packages they import, and the Prometheus package, link neither
// OpenTelemetry (go.opentelemetry.io/...: only a program that imports
// otelmetrics does) nor gRPC (google.golang.org/grpc). otelmetrics itself
// links the OpenTelemetry metrics API only, never its SDK: the program
// chooses the SDK and the exporter.
func TestNoForcedOpenTelemetryOrGRPC(t *testing.T) {
	const module = "github.com/ratekey/ratekey"
	deps := goList(t, "-deps", ".", "./middleware", "./metrics")
	for _, want := range []string{module, module + "/middleware", module + "/metrics", "net/http"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("go list -deps lists no %s: %v", want, deps)
		}
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "go.opentelemetry.io/") || strings.HasPrefix(d, "google.golang.org/grpc") || d == module+"/otelmetrics" {
			t.Errorf("the root package, middleware or metrics imports %s", d)
		}
	}
	otel := goList(t, "-deps", "./otelmetrics")
	if !slices.Contains(otel, "go.opentelemetry.io/otel/metric") {
		t.Fatalf("otelmetrics does not link go.opentelemetry.io/otel/metric: %v", otel)
	}
	for _, d := range otel {
		if strings.HasPrefix(d, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(d, "google.golang.org/grpc") || d == module+"/metrics" {
			t.Errorf("otelmetrics imports %s", d)
		}
	}
}

// TestNoForcedGRPC: the gRPC interceptors live in package grpclimit, so a
// program that imports the HTTP front door (the root package, middleware
// and the packages below them) never links google.golang.org/grpc; and
// grpclimit, like the rest of the library, links no Prometheus.
func TestNoForcedGRPC(t *testing.T) {
	const module = "github.com/ratekey/ratekey"
	for _, d := range goList(t, "-deps", module, module+"/middleware", module+"/identity", module+"/trustedproxy", module+"/limiter/...") {
		if strings.HasPrefix(d, "google.golang.org/grpc") || strings.HasPrefix(d, "google.golang.org/genproto") || d == module+"/grpclimit" {
			t.Errorf("the HTTP front door imports %s: gRPC belongs to package grpclimit only", d)
		}
	}
	deps := goList(t, "-deps", module+"/grpclimit")
	if !slices.Contains(deps, "google.golang.org/grpc") {
		t.Fatalf("go list -deps of grpclimit lists no google.golang.org/grpc: %v", deps)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/prometheus/") || d == module+"/metrics" {
			t.Errorf("grpclimit imports %s: metrics reach it through middleware.Metrics only", d)
		}
	}
}

// TestCoreWithoutNetHTTP: the decision core (internal/engine), its results
// (decide), the policy model (policy) and the key model (limitkey) do not
// know they serve HTTP: nothing they import, directly or not, is net/http
// (or anything under it) or package middleware. middleware does, so the
// check can fail.
func TestCoreWithoutNetHTTP(t *testing.T) {
	const module = "github.com/ratekey/ratekey"
	core := []string{"./internal/engine", "./decide", "./policy", "./limitkey"}
	deps := goList(t, append([]string{"-deps"}, core...)...)
	for _, want := range []string{module + "/internal/engine", module + "/decide", module + "/policy", module + "/limitkey", module + "/limiter"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("go list -deps %v lists no %s: %v", core, want, deps)
		}
	}
	for _, d := range deps {
		if d == "net/http" || strings.HasPrefix(d, "net/http/") || d == module+"/middleware" || d == module+"/trustedproxy" || d == module+"/identity" {
			t.Errorf("the decision core imports %s", d)
		}
	}
	if mw := goList(t, "-deps", "./middleware"); !slices.Contains(mw, "net/http") {
		t.Fatalf("go list -deps ./middleware lists no net/http: the check above would pass whatever: %v", mw)
	}
}
