package httpsonly

import (
	"net/url"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		url  string
		want string // "" for allowed
	}{
		{"https://idp.example/jwks", ""},
		{"https://203.0.113.9/ranges", ""},
		{"http://localhost:8080/x", ""},
		{"http://LOCALHOST/x", ""},
		{"http://127.0.0.1:1/x", ""},
		{"http://127.9.9.9/x", ""},
		{"http://[::1]:80/x", ""},
		{"http://idp.example/jwks", "http is allowed only for loopback hosts; use https"},
		{"http://10.0.0.1/x", "http is allowed only for loopback hosts; use https"},
		{"http://localhost.example/x", "http is allowed only for loopback hosts; use https"},
		{"http://[::ffff:127.0.0.1]/x", ""}, // the IPv4 loopback, mapped
		{"ftp://idp.example/x", `scheme "ftp" is not https`},
		{"HTTP://idp.example/x", "http is allowed only for loopback hosts; use https"}, // url.Parse lower-cases the scheme
	} {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := Check(u); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("Check(%s) = %q; want %q", tt.url, got, tt.want)
		}
	}
}
