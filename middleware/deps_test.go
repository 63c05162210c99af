package middleware_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestNoForcedPrometheus: the library reaches metrics through
// middleware.Metrics, so no package of the module but metrics itself (and
// the demo, a program) depends on github.com/prometheus: not the root
// package, not middleware, identity, trustedproxy or limiter, nor anything
// they import. Only a program that imports package metrics does.
func TestNoForcedPrometheus(t *testing.T) {
	const module = "github.com/ratekey/ratekey"
	goList := func(args ...string) []string {
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
	var library []string
	for _, p := range goList("./...") {
		// Programs (the demo, the docs' complete program) may import it.
		if p != module+"/metrics" && !strings.HasPrefix(p, module+"/cmd/") && !strings.HasPrefix(p, module+"/docs/") {
			library = append(library, p)
		}
	}
	for _, want := range []string{"/middleware", "/identity", "/trustedproxy", "/limiter"} {
		if !slices.Contains(library, module+want) {
			t.Fatalf("go list ./... lists no %s%s: %v", module, want, library)
		}
	}
	deps := goList(append([]string{"-deps"}, library...)...)
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/prometheus/") || d == module+"/metrics" {
			t.Errorf("the library imports %s: metrics must reach it through middleware.Metrics only", d)
		}
	}
	if !slices.Contains(deps, "net/http") {
		t.Fatalf("go list -deps lists no net/http: %v", deps)
	}
}
