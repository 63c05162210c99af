package trustedproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The golden vectors live in ../testdata/trustedproxy, one JSON file per
// group. Each case is a peer, request headers and a policy, and the expected
// outcome. `go test ./trustedproxy -run TestGolden -update` rewrites every
// "want" from the current results (review the diff: that is the point).
var update = flag.Bool("update", false, "rewrite testdata/trustedproxy/*.json wants from the current results")

const goldenDir = "../testdata/trustedproxy"

type goldenFile struct {
	Group string       `json:"group"`
	Doc   string       `json:"doc"`
	Cases []goldenCase `json:"cases"`
}

type goldenCase struct {
	Name string `json:"name"`
	// Note says what the case pins (an advisory, an RFC section, a
	// divergence decision).
	Note   string       `json:"note,omitempty"`
	Policy goldenPolicy `json:"policy"`
	Peer   string       `json:"peer"`
	// Headers maps header keys, used verbatim (so non-canonical keys and
	// aliases can be modelled), to their lines in wire order.
	Headers map[string][]string `json:"headers,omitempty"`
	// Generate appends generated text to a header: one line made of
	// Prefix, Entry repeated Count times joined with Sep (", " when absent)
	// and Suffix; or, with Lines, each of those as its own line (Prefix and
	// Suffix only when not empty).
	Generate *goldenGen `json:"generate,omitempty"`
	Want     goldenWant `json:"want"`
}

type goldenPolicy struct {
	Trusted       []string     `json:"trusted,omitempty"`
	Header        string       `json:"header,omitempty"`
	Rules         []goldenRule `json:"rules,omitempty"`
	IPv4Prefix    int          `json:"ipv4_prefix,omitempty"`
	IPv6Prefix    int          `json:"ipv6_prefix,omitempty"`
	AllowAll      bool         `json:"allow_all,omitempty"`
	MissingHeader string       `json:"missing_header,omitempty"`
	Aliases       string       `json:"aliases,omitempty"`
}

type goldenRule struct {
	From   []string `json:"from"`
	Header string   `json:"header,omitempty"`
	Hops   int      `json:"hops"`
}

type goldenGen struct {
	Header string  `json:"header"`
	Prefix string  `json:"prefix,omitempty"`
	Entry  string  `json:"entry"`
	Sep    *string `json:"sep,omitempty"`
	Count  int     `json:"count"`
	Suffix string  `json:"suffix,omitempty"`
	Lines  bool    `json:"lines,omitempty"`
}

type goldenWant struct {
	// Client and Network are "" on error.
	Client  string `json:"client,omitempty"`
	Network string `json:"network,omitempty"`
	Reason  string `json:"reason"`
	Rule    int    `json:"rule"`
	// Error is the most specific sentinel the error matches (errorNames),
	// "" for success.
	Error string `json:"error,omitempty"`
	// ErrorPosition and ErrorDetail come from a *ChainError.
	ErrorPosition *int   `json:"error_position,omitempty"`
	ErrorDetail   string `json:"error_detail,omitempty"`
	// Hops lists the examined hops in walk order as "position verdict
	// address" (or "position verdict value" when there is no address).
	// Absent (nil) in a hand-written case means "not checked"; -update
	// always writes it.
	Hops *[]string `json:"hops,omitempty"`
}

// errorNames lists the sentinels from most to least specific.
var errorNames = []struct {
	name string
	err  error
}{
	{"ErrUnixPeer", errUnixPeer},
	{"ErrUnknownNode", errUnknownNode},
	{"ErrNonSourceEntry", errNonSourceEntry},
	{"ErrMalformedEntry", ErrMalformedEntry},
	{"ErrChainTooLong", ErrChainTooLong},
	{"ErrMissingHeader", ErrMissingHeader},
	{"ErrHeaderAlias", ErrHeaderAlias},
	{"ErrNonSourcePeer", errNonSourcePeer},
	{"ErrMalformedPeer", ErrMalformedPeer},
}

func errorName(err error) string {
	if err == nil {
		return ""
	}
	for _, e := range errorNames {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return "unexpected: " + err.Error()
}

func (p goldenPolicy) config() Config {
	cfg := Config{IPv4Prefix: p.IPv4Prefix, IPv6Prefix: p.IPv6Prefix,
		AllowAll: p.AllowAll, RejectMissingHeader: p.MissingHeader == "reject", RejectAliases: p.Aliases == "reject"}
	if len(p.Trusted) > 0 { // the vectors' v0 form is one rule; a header with nobody trusted is never read
		cfg.Rules = append(cfg.Rules, Rule{From: p.Trusted, Header: p.Header})
	}
	for _, r := range p.Rules {
		cfg.Rules = append(cfg.Rules, Rule{From: r.From, Header: r.Header, Hops: r.Hops})
	}
	return cfg
}

func (c goldenCase) header() http.Header {
	h := http.Header{}
	for k, v := range c.Headers {
		h[k] = append([]string(nil), v...)
	}
	if g := c.Generate; g != nil && g.Lines {
		if g.Prefix != "" {
			h[g.Header] = append(h[g.Header], g.Prefix)
		}
		for i := 0; i < g.Count; i++ {
			h[g.Header] = append(h[g.Header], g.Entry)
		}
		if g.Suffix != "" {
			h[g.Header] = append(h[g.Header], g.Suffix)
		}
	} else if g != nil {
		sep := ", "
		if g.Sep != nil {
			sep = *g.Sep
		}
		var b strings.Builder
		b.WriteString(g.Prefix)
		for i := 0; i < g.Count; i++ {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(g.Entry)
		}
		b.WriteString(g.Suffix)
		h[g.Header] = append(h[g.Header], b.String())
	}
	return h
}

// observe runs Explain and describes the outcome in goldenWant form.
func observe(r *Resolver, peer string, h http.Header) (goldenWant, Result, error) {
	res, err := r.Explain(peer, h, nil)
	w := goldenWant{Reason: res.Derivation.Reason, Rule: res.Derivation.Rule, Error: errorName(err)}
	if err == nil {
		w.Client, w.Network = res.Client.String(), res.Network.String()
	}
	var ce *ChainError
	if errors.As(err, &ce) {
		pos := ce.Position
		w.ErrorPosition, w.ErrorDetail = &pos, ce.Detail
	}
	hops := []string{}
	for _, hop := range res.Derivation.Hops {
		v := hop.Address
		if v == "" {
			v = hop.Value
		}
		hops = append(hops, fmt.Sprintf("%d %s %s", hop.Position, hop.Verdict, v))
	}
	w.Hops = &hops
	return w, res, err
}

func loadGolden(t *testing.T) (files []string, groups []goldenFile) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files in %s: %v", goldenDir, err)
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var g goldenFile
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&g); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		groups = append(groups, g)
	}
	return files, groups
}

func TestGolden(t *testing.T) {
	files, groups := loadGolden(t)
	total := 0
	names := map[string]bool{}
	for gi, g := range groups {
		for ci := range g.Cases {
			c := &g.Cases[ci]
			total++
			full := g.Group + "/" + c.Name
			if names[full] {
				t.Errorf("duplicate case name %q", full)
			}
			names[full] = true
			t.Run(full, func(t *testing.T) {
				r, err := New(c.Policy.config())
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				h := c.header()
				got, res, rerr := observe(r, c.Peer, h)
				checkAgreement(t, r, c.Peer, h, res, rerr)
				if *update {
					c.Want = got
					return
				}
				want := c.Want
				if want.Hops == nil {
					got.Hops = nil // not checked by this hand-written case
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("\n got %s\nwant %s\n(error: %v)", js(got), js(want), rerr)
				}
			})
		}
		if *update {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(g); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(files[gi], b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if total < 100 {
		t.Errorf("%d golden cases, want at least 100", total)
	}
	t.Logf("%d golden cases in %d files", total, len(files))
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// checkAgreement asserts that Resolve and Explain(buf) agree with
// Explain on the same input.
func checkAgreement(t *testing.T, r *Resolver, peer string, h http.Header, res Result, err error) {
	t.Helper()
	res2, err2 := r.Resolve(peer, h)
	if want := withoutHops(res); !reflect.DeepEqual(res2, want) || errorName(err2) != errorName(err) {
		t.Errorf("Resolve = %+v, %v; Explain without its hops = %+v, %v", res2, err2, want, err)
	}
	var ce1, ce2 *ChainError
	if errors.As(err, &ce1) != errors.As(err2, &ce2) || (ce1 != nil && *ce1 != *ce2) {
		t.Errorf("Resolve ChainError %+v; Explain %+v", ce2, ce1)
	}
	if err2 != nil && err != nil && err2.Error() != err.Error() {
		t.Errorf("Resolve error %q; Explain %q", err2, err)
	}
	buf := make([]Hop, 0, MaxHops)
	res3, err3 := r.Explain(peer, h, buf)
	if !reflect.DeepEqual(res3, res) || errorName(err3) != errorName(err) {
		t.Errorf("Explain(buf) = %+v, %v; Explain = %+v, %v", res3, err3, res, err)
	}
}

// withoutHops is res as Resolve returns it: Explain's Result without the
// hop list and so without a chosen hop.
func withoutHops(res Result) Result {
	res.Derivation.Hops, res.Derivation.Chosen = nil, -1
	return res
}
