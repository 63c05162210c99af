package grpcmethod

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	long := "/a.S/" + strings.Repeat("m", MaxLen-5)
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"/pkg.Service/Method", true},
		{"/grpc.health.v1.Health/Check", true},
		{"/ratekey.demo.v1.Work/Do", true},
		{"/a_b.C9/_e", true},
		{long, true},
		{long + "m", false},
		{"/Service/Method", false}, // no package: "/v1/work" is a route without its method
		{"/v1/work", false},
		{"/v1/reports/{id}", false},
		{"", false},
		{"/", false},
		{"//", false},
		{"/a.S/", false},
		{"//M", false},
		{"/a.S/M/", false},
		{"/a.S/M/x", false},
		{"a.S/M", false},
		{"POST /a.S/M", false},
		{"/a.S /M", false},
		{"/a..S/M", false},
		{".a.S/M", false},
		{"/.a.S/M", false},
		{"/a.S./M", false},
		{"/a.9S/M", false},
		{"/a.S/9M", false},
		{"/a-b.S/M", false},
		{"/a.S/M-x", false},
		{"/a.S/M\n", false},
		{"/a.S/Mé", false},
	} {
		if got := Valid(tc.in); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzValid: a valid name has exactly two slashes, the first at 0, a
// dotted service and a method, and only letters, digits, "_" and ".".
func FuzzValid(f *testing.F) {
	for _, s := range []string{"/pkg.Service/Method", "/S/M", "//", "/S/M/", "GET /v1/{id}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !Valid(s) {
			return
		}
		parts := strings.Split(s, "/")
		if len(parts) != 3 || parts[0] != "" || parts[1] == "" || parts[2] == "" || len(s) > MaxLen {
			t.Fatalf("Valid(%q) but its segments are %q", s, parts)
		}
		if !strings.Contains(parts[1], ".") || strings.IndexFunc(s, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '/')
		}) >= 0 {
			t.Fatalf("Valid(%q) but its service has no package, or it holds a byte outside [A-Za-z0-9_./]", s)
		}
	})
}
