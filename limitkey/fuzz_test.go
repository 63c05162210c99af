package limitkey

import (
	"testing"
)

var fuzzDims = [...]Dimension{DimTenant, DimAccount, DimCredential, DimOperation, DimNetwork, "custom_dim", "a"}

// FuzzKeyRoundTrip checks, for arbitrary policy and values, that the
// encoding matches the slow reference encoder, is printable ASCII, and that
// Parse inverts it exactly.
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("per-account", "acme", "alice", "GET /v1/reports/{id}", uint8(3), uint8(0))
	f.Add("p", "a:b", "c", "", uint8(2), uint8(1))
	f.Add("p", "a|b", "c", "", uint8(2), uint8(2))
	f.Add("a|b=c%", "%7C", "\x00\xff", "é", uint8(3), uint8(5))
	f.Add("global", "", "", "", uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, policy, v1, v2, v3 string, n, dimSel uint8) {
		vals := []string{v1, v2, v3}
		k := Key{Policy: policy}
		for i := 0; i < int(n%4); i++ {
			d := fuzzDims[(int(dimSel)+i)%len(fuzzDims)]
			k.Parts = append(k.Parts, Part{Dimension: d, Value: vals[i%3]})
		}
		s := k.String()
		if ref := referenceEncode(k); s != ref {
			t.Fatalf("String() = %q, reference = %q", s, ref)
		}
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				t.Fatalf("non-printable byte %#x in %q", s[i], s)
			}
		}
		back, err := Parse(s)
		if policy == "" {
			if err == nil {
				t.Fatalf("Parse(%q) accepted an empty policy", s)
			}
			return
		}
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if !keysEqual(back, k) {
			t.Fatalf("Parse(%q) = %#v, want %#v", s, back, k)
		}
	})
}

// FuzzParseKey checks that Parse never panics and accepts only canonical
// encodings: anything it accepts re-encodes to exactly the input and is a
// valid key.
func FuzzParseKey(f *testing.F) {
	f.Add("per-account|tenant=acme|account=alice|operation=GET /v1/reports/{id}")
	f.Add("p|account=a%7Cb")
	f.Add("p|account=%7c")
	f.Add("p|account=%41")
	f.Add("p|")
	f.Add("")
	f.Add("%")
	f.Add("p|tenant=%C3%A9|x=")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := Parse(s)
		if err != nil {
			return
		}
		if got := k.String(); got != s {
			t.Fatalf("Parse(%q) accepted a non-canonical form; re-encodes to %q", s, got)
		}
		if k.Policy == "" {
			t.Fatalf("Parse(%q) accepted an empty policy", s)
		}
		for _, p := range k.Parts {
			if _, err := ParseDimension(string(p.Dimension)); err != nil {
				t.Fatalf("Parse(%q) accepted dimension %q", s, p.Dimension)
			}
		}
	})
}
