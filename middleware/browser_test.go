package middleware_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/servertest"
	"github.com/ratekey/ratekey/policy"
)

// TestDebugPageInChromium loads the debug endpoint's HTML view in a real
// headless browser: the browser's own Accept header selects the page, the
// rendered DOM holds one table per stage, each policy's row shows every
// field of its debug JSON (a token bucket with an override, an in-flight
// cap with a slot held, the memory store's cached and slot), the record's
// round trips are shown, and a screenshot is taken (kept in
// $RATEKEY_SCREENSHOT_DIR when set).
func TestDebugPageInChromium(t *testing.T) {
	chromium := servertest.Require(t, "chromium", "chromium", "chromium-browser")
	s := newStack(t, stackOptions{anonymous: true, policies: append([]policy.Policy{perNetwork("1/s", 3)}, pageScenario()...),
		admins: []string{"127.0.0.1/32"}})
	release := holdSlot(t, s.lim, capPolicy(), "127.0.0.1:7")
	defer release()
	// The browser sends no credential: a front proxy adds alice's, of
	// tenant acme, whose override the per-tenant policy applies.
	tok := s.token("alice", "app-1")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+tok)
		s.handler.ServeHTTP(w, r)
	}))
	defer srv.Close()
	url := srv.URL + "/debug/ratekey?method=GET&path=/v1/reports/7"

	dir := t.TempDir()
	if d := os.Getenv("RATEKEY_SCREENSHOT_DIR"); d != "" {
		dir = d
	}
	shot := filepath.Join(dir, "debug-page.png")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--no-first-run", "--user-data-dir=" + t.TempDir(), "--window-size=1280,1400"}
		cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
		}
		return out.String()
	}
	dom := run("--dump-dom", url)
	for _, want := range []string{"1. Client address", "2. Credential", "3. Operation", "4. Policies",
		"GET /v1/reports/{id}", "per-network|network=127.0.0.1/32", "PASSED"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	if n := strings.Count(dom, "<table"); n < 4 {
		t.Errorf("rendered page has %d tables; want one per stage (4+)", n)
	}
	pols := pagePolicies(t, dom)
	want := wantScenarioRows("127.0.0.1/32")
	want["per-network"] = map[string]string{"key": "per-network|network=127.0.0.1/32", "decision": "PASSED", "override": "—",
		"cost": "1", "rate": "1/s", "burst": "3", "delay after": "3", "max in flight": "—", "in flight": "—", "remaining": "2",
		"retry after": "—", "delay": "—", "store": "memory", "cached": "false", "slot": "—", "note": ""}
	for name, cells := range want {
		checkCells(t, "rendered "+name, pols[name], cells)
	}
	if len(pols) != len(want) {
		t.Errorf("rendered page has %d policy rows; want %d", len(pols), len(want))
	}
	checkCells(t, "rendered operation", pageFields(t, dom, "3. Operation"), map[string]string{"decision": "PASSED", "round trips": "0"})
	run("--screenshot="+shot, url)
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Errorf("screenshot is not a plausible PNG (%d bytes)", len(png))
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
