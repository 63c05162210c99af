package trustedproxy

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// forwardedNode writes one X-Forwarded-For entry (OWS trimmed) as the value
// of an RFC 7239 for parameter, or reports that the entry has no Forwarded
// equivalent (a zoned IPv6 address, which RFC 7239 cannot carry; an entry
// such as "1.2.3.4:_x" that only the RFC 7239 grammar accepts).
func forwardedNode(e string) (string, bool) {
	a, text, kind := classifyXFF(e)
	node := e
	if kind == nodeAddr {
		if strings.IndexByte(e, '%') >= 0 {
			return "", false
		}
		port := ""
		if strings.HasPrefix(e, "[") {
			port = e[strings.IndexByte(e, ']')+1:]
		} else if a.Is4() && len(e) > len(text) {
			port = e[len(text):]
		}
		node = text + port
		if a.Is6() || strings.Contains(text, ":") {
			node = "[" + text + "]" + port
		}
	}
	// The Forwarded reading of the node must classify it as XFF does.
	if na, _, nk := parseNode(node); nk != kind || na != a {
		return "", false
	}
	for i := 0; i < len(node); i++ {
		if !tchar[node[i]] {
			var b strings.Builder
			b.WriteByte('"')
			for j := 0; j < len(node); j++ {
				if node[j] == '"' || node[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(node[j])
			}
			b.WriteByte('"')
			return b.String(), true
		}
	}
	return node, true
}

// xffLinesToForwarded writes X-Forwarded-For lines as Forwarded lines, one
// for= element per entry, keeping empty elements empty and blank lines
// blank.
func xffLinesToForwarded(lines []string) ([]string, bool) {
	out := make([]string, len(lines))
	for i, l := range lines {
		if trimOWS(l) == "" {
			out[i] = l
			continue
		}
		parts := strings.Split(l, ",")
		for j, p := range parts {
			p = trimOWS(p)
			if p == "" {
				parts[j] = ""
				continue
			}
			node, ok := forwardedNode(p)
			if !ok {
				return nil, false
			}
			parts[j] = "for=" + node
		}
		out[i] = strings.Join(parts, ", ")
	}
	return out, true
}

// outcome is what must agree between the two encodings of one chain.
type outcome struct {
	Client, Network string
	Reason          string
	Rule            int
	Err             string
	ErrPos          int
	Hops            []string // position, verdict, address (values differ by encoding)
}

func outcomeOf(r *Resolver, peer string, h http.Header) outcome {
	w, res, _ := observe(r, peer, h)
	o := outcome{Client: w.Client, Network: w.Network, Reason: w.Reason, Rule: w.Rule, Err: w.Error, ErrPos: -1}
	if w.ErrorPosition != nil {
		o.ErrPos = *w.ErrorPosition
	}
	for _, hop := range res.Derivation.Hops {
		o.Hops = append(o.Hops, fmt.Sprintf("%d %s %s", hop.Position, hop.Verdict, hop.Address))
	}
	return o
}

// TestGoldenForwardedEncoding replays every golden case that reads
// X-Forwarded-For with the chain written as Forwarded instead, and checks
// the outcome is the same (RFC 7239 §7.4 presents Forwarded as the
// standard form of the same information). Cases whose chain has no
// Forwarded equivalent, that already carry Forwarded, or that test header
// aliases, are skipped.
func TestGoldenForwardedEncoding(t *testing.T) {
	_, groups := loadGolden(t)
	checked := 0
	for _, g := range groups {
		for _, c := range g.Cases {
			if c.Policy.Aliases != "" || c.Headers[headerForwarded] != nil {
				continue
			}
			pol := c.Policy
			usesXFF := false
			if http.CanonicalHeaderKey(pol.Header) == headerXForwardedFor {
				pol.Header, usesXFF = headerForwarded, true
			}
			pol.Rules = append([]goldenRule(nil), pol.Rules...)
			for i := range pol.Rules {
				if http.CanonicalHeaderKey(pol.Rules[i].Header) == headerXForwardedFor {
					pol.Rules[i].Header, usesXFF = headerForwarded, true
				}
			}
			if !usesXFF {
				continue
			}
			h := c.header()
			fh := h.Clone()
			if lines, ok := h[headerXForwardedFor]; ok {
				fl, ok := xffLinesToForwarded(lines)
				if !ok {
					continue
				}
				delete(fh, headerXForwardedFor)
				fh[headerForwarded] = fl
			}
			t.Run(g.Group+"/"+c.Name, func(t *testing.T) {
				rx := mustNew(t, c.Policy.config())
				rf := mustNew(t, pol.config())
				ox, of := outcomeOf(rx, c.Peer, h), outcomeOf(rf, c.Peer, fh)
				if !reflect.DeepEqual(ox, of) {
					t.Errorf("X-Forwarded-For %+v\nForwarded       %+v\nlines %q", ox, of, fh[headerForwarded])
				}
			})
			checked++
		}
	}
	if checked < 60 {
		t.Errorf("only %d golden cases cross-checked", checked)
	}
	t.Logf("%d golden cases cross-checked as Forwarded", checked)
}

func TestForwardedNode(t *testing.T) {
	tests := []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"192.0.2.1:80", `"192.0.2.1:80"`},
		{"2001:db8::1", `"[2001:db8::1]"`},
		{"[2001:db8::1]:443", `"[2001:db8::1]:443"`},
		{"::ffff:1.2.3.4", `"[::ffff:1.2.3.4]"`},
		{"unknown", "unknown"},
		{"_obf", "_obf"},
		{"garbage", "garbage"},
		{`x "y\`, `"x \"y\\"`},
		{"fe80::1%eth0", ""}, // no Forwarded equivalent
	}
	for _, tc := range tests {
		got, ok := forwardedNode(tc.in)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("forwardedNode(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}
