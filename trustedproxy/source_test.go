package trustedproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go4.org/netipx"
)

// staticSource returns a Source whose Load always returns set (a
// SourceFunc, as the SourceFunc documentation shows).
func staticSource(set *netipx.IPSet) Source {
	return SourceFunc(func(context.Context) (*netipx.IPSet, error) { return set, nil })
}

func TestParseSet(t *testing.T) {
	s, err := ParseSet([]string{"10.0.0.0/8", "192.0.2.1", "::ffff:172.16.0.0/108", "fe80::1%eth0", "2001:DB8::/32", "loopback", "link_local", "private_ranges"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"10.255.0.1", true}, {"192.0.2.1", true}, {"192.0.2.2", false}, {"172.31.0.1", true},
		{"fe80::1", true}, {"fe80::99", true /* link_local */}, {"2001:db8::1", true},
		{"127.0.0.1", true}, {"::1", true}, {"169.254.1.1", true}, {"192.168.1.1", true}, {"fd00::1", true}, {"fc00::1", true},
		{"100.64.0.1", false /* CGNAT is not private_ranges */}, {"8.8.8.8", false}, {"2001:db9::1", false},
	} {
		if got := s.Contains(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Contains(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if s, err := ParseSet(nil); err != nil || len(s.Ranges()) != 0 {
		t.Errorf("ParseSet(nil) = %v, %v", s, err)
	}
	// Catch-alls parse (New refuses them, not ParseSet).
	if s, err := ParseSet([]string{"0.0.0.0/0"}); err != nil || !s.ContainsPrefix(allV4) {
		t.Errorf("ParseSet(0.0.0.0/0) = %v, %v", s, err)
	}
	_, err = ParseSet([]string{"10.0.0.0/8", "unix", "nope", " 10.0.0.1", "PRIVATE_RANGES"})
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 4 {
		t.Fatalf("ParseSet errors = %v", err)
	}
	for i, w := range []string{`[1] "unix": "unix" names Unix-socket peers`, `[2] "nope"`, `[3] " 10.0.0.1"`, `[4] "PRIVATE_RANGES"`} {
		if !strings.Contains(joined.Unwrap()[i].Error(), w) {
			t.Errorf("error %d = %q, want %q", i, joined.Unwrap()[i], w)
		}
	}
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.txt")
	os.WriteFile(good, []byte("# Cloudflare\r\n173.245.48.0/20\r\n\r\n  2400:cb00::/32\t\nloopback\n"), 0o644)
	s, err := FileSource{Path: good}.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"173.245.48.1", "2400:cb00::1", "127.0.0.1"} {
		if !s.Contains(netip.MustParseAddr(a)) {
			t.Errorf("file set lacks %s", a)
		}
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("10.0.0.0/8\nnot-a-range\n192.0.2.0/33\n"), 0o644)
	_, err = FileSource{Path: bad}.Load(context.Background())
	if want := "FileSource " + bad + ": line 2 \"not-a-range\": not an IP address or CIDR prefix\n" +
		"line 3 \"192.0.2.0/33\": not a CIDR prefix: the length must be 0..32 for IPv4"; err == nil || err.Error() != want {
		t.Errorf("bad file: %v\nwant %s", err, want)
	}
	if _, err := (FileSource{Path: good, MaxBytes: 10}).Load(context.Background()); err == nil || err.Error() != "FileSource: "+good+": file too large: 60 bytes, at most 10" {
		t.Errorf("over-size file: %v", err)
	}
	if _, err := (FileSource{Path: filepath.Join(dir, "missing")}).Load(context.Background()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (FileSource{Path: good}).Load(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestURLSource(t *testing.T) {
	var body atomic.Value
	body.Store("203.0.113.0/24\n2001:db8:cd::/48\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ranges":
			fmt.Fprint(w, body.Load().(string))
		case "/redirect":
			http.Redirect(w, r, "/ranges", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()

	s, err := URLSource{URL: srv.URL + "/ranges"}.Load(ctx)
	if err != nil || !s.Contains(netip.MustParseAddr("203.0.113.9")) || !s.Contains(netip.MustParseAddr("2001:db8:cd::9")) {
		t.Fatalf("Load = %v, %v", s, err)
	}
	if s, err := (URLSource{URL: srv.URL + "/redirect"}).Load(ctx); err != nil || !s.Contains(netip.MustParseAddr("203.0.113.9")) {
		t.Errorf("redirect: %v, %v", s, err)
	}
	if _, err := (URLSource{URL: srv.URL + "/missing"}).Load(ctx); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: %v", err)
	}
	if _, err := (URLSource{URL: srv.URL + "/ranges", MaxBytes: 8}).Load(ctx); err == nil || !strings.Contains(err.Error(), "larger than 8 bytes") {
		t.Errorf("over-size: %v", err)
	}
	body.Store("203.0.113.0/24\nbogus\n")
	if _, err := (URLSource{URL: srv.URL + "/ranges"}).Load(ctx); err == nil || !strings.Contains(err.Error(), `line 2 "bogus"`) {
		t.Errorf("bad body: %v", err)
	}
	for _, u := range []string{"file:///etc/hosts", "ftp://example.com/x", "://", "http://"} {
		if _, err := (URLSource{URL: u}).Load(ctx); err == nil || !strings.Contains(err.Error(), "not an http or https URL") {
			t.Errorf("URL %q: %v", u, err)
		}
	}
	// A transport failure (nothing listens there) names the URL without
	// its user information and query, where a secret may be.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://u:hunter2@" + ln.Addr().String() + "/ranges?access_key=SECRET"
	ln.Close()
	if _, err := (URLSource{URL: closed}).Load(ctx); err == nil || strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "hunter2") ||
		!strings.Contains(err.Error(), "/ranges?…") {
		t.Errorf("transport failure: %v; want the URL without its query and password", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := (URLSource{URL: srv.URL + "/ranges"}).Load(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// switchable is a Source whose next result the test sets.
type switchable struct {
	mu    sync.Mutex
	set   *netipx.IPSet
	err   error
	loads int
}

func (s *switchable) Load(context.Context) (*netipx.IPSet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	return s.set, s.err
}

func (s *switchable) next(set *netipx.IPSet, err error) {
	s.mu.Lock()
	s.set, s.err = set, err
	s.mu.Unlock()
}

func TestRefresh(t *testing.T) {
	src := &switchable{set: mustSet(t, "192.0.2.0/24")}
	r := mustNew(t, Config{Rules: []Rule{
		{From: []string{"10.0.0.0/8"}, Sources: []Source{src}, Header: "X-Forwarded-For"},
		{From: []string{"127.0.0.1"}}, // no sources: untouched by Refresh
	}})
	ctx := context.Background()
	client := func(peer string) string {
		t.Helper()
		res, err := r.Resolve(peer, xff("203.0.113.7"))
		if err != nil {
			t.Fatal(err)
		}
		return res.Client.String()
	}
	if client("192.0.2.5:1") != "203.0.113.7" || client("198.51.100.5:1") != "198.51.100.5" || client("10.0.0.1:1") != "203.0.113.7" {
		t.Fatal("initial set not in use")
	}

	// A good load replaces the source part; From stays.
	src.next(mustSet(t, "198.51.100.0/24"), nil)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if client("192.0.2.5:1") != "192.0.2.5" || client("198.51.100.5:1") != "203.0.113.7" || client("10.0.0.1:1") != "203.0.113.7" {
		t.Fatal("refreshed set not in use")
	}
	good := r.trustedSet(0)

	// Failures keep the last good set and are reported, naming the rule.
	for name, tc := range map[string]struct {
		set  *netipx.IPSet
		err  error
		want string
	}{
		"error":     {nil, errors.New("upstream down"), "rules[0].sources[0]: upstream down"},
		"nil set":   {nil, nil, "rules[0].sources[0]: loaded an empty set"},
		"empty set": {&netipx.IPSet{}, nil, "loaded an empty set"},
		"catch-all": {mustSet(t, "::/0"), nil, "rules[0].sources: the set trusts every"},
	} {
		src.next(tc.set, tc.err)
		err := r.Refresh(ctx)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Refresh error %v, want %q", name, err, tc.want)
		}
		if r.trustedSet(0) != good || client("198.51.100.5:1") != "203.0.113.7" {
			t.Errorf("%s: last good set not kept", name)
		}
	}
	if r.trustedSet(1) == nil || !r.trustedSet(1).Contains(netip.MustParseAddr("127.0.0.1")) {
		t.Error("rule without sources changed")
	}
	if err := (*Resolver)(nil).Refresh(ctx); err != nil {
		t.Error(err)
	}
}

func TestRefreshAllowAll(t *testing.T) {
	src := &switchable{set: mustSet(t, "192.0.2.0/24")}
	r := mustNew(t, Config{Rules: []Rule{{Sources: []Source{src}}}, AllowAll: true})
	src.next(mustSet(t, "0.0.0.0/0"), nil)
	if err := r.Refresh(context.Background()); err != nil || !r.trusts(netip.MustParseAddr("8.8.8.8")) {
		t.Errorf("AllowAll refresh: %v", err)
	}
}

// loadResult is one answer of a stepped Source.
type loadResult struct {
	set *netipx.IPSet
	err error
}

// TestRefreshSequence: a failing refresh reports its source's error and
// keeps the last good set; a successful one applies its set and reports
// nothing.
func TestRefreshSequence(t *testing.T) {
	// Each Load takes its answer from the test, in turn.
	answers := make(chan loadResult, 1)
	src := SourceFunc(func(context.Context) (*netipx.IPSet, error) {
		a := <-answers
		return a.set, a.err
	})
	answers <- loadResult{set: mustSet(t, "192.0.2.0/24")} // New's initial load
	r := mustNew(t, Config{Rules: []Rule{{Sources: []Source{src}, Header: "X-Real-IP"}}})
	ctx := context.Background()

	answers <- loadResult{err: errors.New("down")}
	if err := r.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "down") {
		t.Errorf("Refresh = %v", err)
	}
	if !r.trusts(netip.MustParseAddr("192.0.2.1")) {
		t.Error("a failed refresh dropped the last good set")
	}
	answers <- loadResult{set: mustSet(t, "198.51.100.0/24")}
	if err := r.Refresh(ctx); err != nil {
		t.Errorf("Refresh = %v; want nil", err)
	}
	if !r.trusts(netip.MustParseAddr("198.51.100.1")) || r.trusts(netip.MustParseAddr("192.0.2.1")) {
		t.Error("Refresh did not apply the good set")
	}
}

// TestRefreshConcurrentWithResolve: resolutions racing with refreshes see
// either the old or the new set, never a failure (run with -race).
func TestRefreshConcurrentWithResolve(t *testing.T) {
	a, b := mustSet(t, "192.0.2.0/24"), mustSet(t, "198.51.100.0/24")
	src := &switchable{set: a}
	r := mustNew(t, Config{Rules: []Rule{{Sources: []Source{src}, Header: "X-Forwarded-For"}}})
	h := xff("203.0.113.7")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, peer := range []string{"192.0.2.1:1", "198.51.100.1:1"} {
					res, err := r.Explain(peer, h, nil)
					if err != nil {
						t.Error(err)
						return
					}
					c := res.Client.String()
					if c != "203.0.113.7" && c != strings.TrimSuffix(peer, ":1") {
						t.Errorf("client %s for peer %s", c, peer)
						return
					}
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if i%2 == 0 {
			src.next(b, nil)
		} else {
			src.next(a, nil)
		}
		if err := r.Refresh(context.Background()); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestSourceSetIsCanonicalised: a Source's set written in IPv4-mapped form
// trusts the IPv4 addresses it maps, as the same entry in From does
// (lookups are always made with unmapped addresses), and ::ffff:0:0/96
// counts as every IPv4 address.
func TestSourceSetIsCanonicalised(t *testing.T) {
	raw := func(prefixes ...string) *netipx.IPSet { // not through ParseSet, which canonicalises
		var b netipx.IPSetBuilder
		for _, p := range prefixes {
			b.AddPrefix(netip.MustParsePrefix(p))
		}
		s, err := b.IPSet()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	viaSource := mustNew(t, Config{Rules: []Rule{{Sources: []Source{staticSource(raw("::ffff:10.0.0.0/104"))}, Header: "X-Forwarded-For"}}})
	h := http.Header{"X-Forwarded-For": {"203.0.113.9"}}
	for _, peer := range []string{"10.0.0.1:1", "[::ffff:10.0.0.1]:1"} {
		res, err := viaSource.Explain(peer, h, nil)
		if err != nil || res.Client != netip.MustParseAddr("203.0.113.9") || res.Derivation.Reason != reasonFirstUntrustedHop {
			t.Errorf("peer %s: client %v (%s), %v; want 203.0.113.9 (first_untrusted_hop): the mapped range trusts 10/8", peer, res.Client, res.Derivation.Reason, err)
		}
	}
	if !viaSource.trusts(netip.MustParseAddr("10.0.0.1")) || !viaSource.trusts(netip.MustParseAddr("::ffff:10.0.0.1")) {
		t.Error("Trusts(10.0.0.1) or Trusts(::ffff:10.0.0.1) is false for a Source holding ::ffff:10.0.0.0/104")
	}
	_, err := New(Config{Rules: []Rule{{Sources: []Source{staticSource(raw("::ffff:0:0/96"))}, Header: "X-Forwarded-For"}}})
	if err == nil || !strings.Contains(err.Error(), "every IPv4 or every IPv6") {
		t.Errorf("a Source of ::ffff:0:0/96 (every IPv4 address): %v; want refused without AllowAll", err)
	}
}

// roundTrip is an http.RoundTripper from a function: the network path.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestURLSourceNeedsHTTPS: a trust list decides who may name any client,
// so it is fetched over https, or plain http to a loopback host only
// (as a JWK Set is): over plain http anyone on the path could answer with
// a range of their own. The default client follows no redirect down to
// plain http to another host either.
func TestURLSourceNeedsHTTPS(t *testing.T) {
	fetched := 0
	path := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		fetched++
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("198.51.100.0/24\n")), Request: r}, nil
	})}
	ctx := context.Background()
	_, err := URLSource{URL: "http://u:hunter2@ranges.example/ips-v4", Client: path}.Load(ctx)
	if err == nil || !strings.Contains(err.Error(), "http is allowed only for loopback hosts; use https") || strings.Contains(err.Error(), "hunter2") || fetched != 0 {
		t.Errorf("plain http to another host: %v (fetched %d times); want refused before fetching, without the password", err, fetched)
	}
	if _, err := New(Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For",
		Sources: []Source{URLSource{URL: "http://ranges.example/ips-v4", Client: path}}}}}); err == nil {
		t.Error("New accepted a plain-http trust list from another host")
	}
	if s, err := (URLSource{URL: "https://ranges.example/ips-v4", Client: path}).Load(ctx); err != nil || !s.Contains(netip.MustParseAddr("198.51.100.7")) {
		t.Errorf("https: %v, %v", s, err)
	}
	from, _ := http.NewRequest(http.MethodGet, "https://ranges.example/ips-v4", nil)
	for _, tt := range []struct {
		to   string
		want bool // followed
	}{
		{"https://mirror.example/ips-v4", true},
		{"http://127.0.0.1:8080/ips-v4", true},
		{"http://mirror.example/ips-v4", false},
		{"ftp://mirror.example/ips-v4", false},
	} {
		next, _ := http.NewRequest(http.MethodGet, tt.to, nil)
		if err := defaultSourceClient.CheckRedirect(next, []*http.Request{from}); (err == nil) != tt.want {
			t.Errorf("redirect to %s: %v; want followed %v", tt.to, err, tt.want)
		}
	}
	// A client of the caller's that follows redirects: the list reached
	// through one down to plain http to another host is refused.
	redirecting := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host == "ranges.example" {
			return &http.Response{StatusCode: http.StatusFound, Status: "302 Found", Request: r,
				Header: http.Header{"Location": {"http://mirror.example/ips-v4"}}, Body: http.NoBody}, nil
		}
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("198.51.100.0/24\n")), Request: r}, nil
	})}
	_, err = URLSource{URL: "https://ranges.example/ips-v4", Client: redirecting}.Load(ctx)
	if want := "URLSource https://ranges.example/ips-v4: redirected: http is allowed only for loopback hosts; use https"; fmt.Sprint(err) != want {
		t.Errorf("a caller's client redirected to plain http: %v; want %s", err, want)
	}
}

// TestFileSourceBadLinesBounded: a bad line is quoted through
// internal/quote (64 bytes and its length), never whole, and never again
// inside netip's error text; past 10 bad lines only their count is given.
func TestFileSourceBadLinesBounded(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, "long.txt")
	if err := os.WriteFile(long, []byte("10.0.0.0/8\n"+strings.Repeat("9", 100<<10)+"/8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := FileSource{Path: long}.Load(context.Background())
	want := "FileSource " + long + `: line 2 "` + strings.Repeat("9", 64) + `"… (102402 bytes): not an IP address or CIDR prefix`
	if err == nil || err.Error() != want || len(err.Error()) > 300 {
		t.Errorf("100 KB bad line: %d bytes of error %.400q; want %q", len(fmt.Sprint(err)), err, want)
	}

	// ParseSet and Rule.From quote the same way.
	huge := strings.Repeat("1", 100<<10) + "/99"
	_, err = ParseSet([]string{"10.0.0.0/8", huge})
	if want := `[1] "` + strings.Repeat("1", 64) + `"… (102403 bytes): not an IP address or CIDR prefix`; err == nil || err.Error() != want {
		t.Errorf("ParseSet: %.400q; want %q", err, want)
	}
	_, err = New(Config{Rules: []Rule{{From: []string{"192.0.2.1/" + strings.Repeat("9", 100<<10)}}}})
	if want := `rules[0].from[0] "192.0.2.1/` + strings.Repeat("9", 54) + `"… (102410 bytes): not a CIDR prefix: the length must be 0..32 for IPv4`; err == nil || err.Error() != want {
		t.Errorf("New: %.400q; want %q", err, want)
	}

	many := filepath.Join(dir, "many.txt")
	if err := os.WriteFile(many, []byte(strings.Repeat("bad\n", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = FileSource{Path: many}.Load(context.Background())
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) != 11 || lines[0] != "FileSource "+many+`: line 1 "bad": not an IP address or CIDR prefix` ||
		lines[9] != `line 10 "bad": not an IP address or CIDR prefix` || lines[10] != "and 990 more bad lines" {
		t.Errorf("1000 bad lines: %d lines of error:\n%v", len(lines), err)
	}
}
