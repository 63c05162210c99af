package grpcmethod

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"/pkg.Service/Method", true},
		{"/grpc.health.v1.Health/Check", true},
		{"/S/M", true},
		{"/a_b.C-d/E_f", true},
		{"", false},
		{"/", false},
		{"//", false},
		{"/S/", false},
		{"//M", false},
		{"/S/M/", false},
		{"/S/M/x", false},
		{"S/M", false},
		{"POST /S/M", false},
		{"/S /M", false},
		{"/S/{id}", false},
		{"/S/M\n", false},
		{"/S/M\x00", false},
		{"/S/Mé", false},
		{"/S/" + strings.Repeat("m", MaxLen-2), false},
		{"/S/" + strings.Repeat("m", MaxLen-3), true},
	} {
		if got := Valid(tc.in); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzValid: a valid name has exactly two slashes, the first at 0, both
// segments non-empty, and only printable ASCII without space or braces.
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
		if strings.ContainsAny(s, " {}") || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
			t.Fatalf("Valid(%q) but it holds a space, a brace or a byte outside printable ASCII", s)
		}
	})
}
