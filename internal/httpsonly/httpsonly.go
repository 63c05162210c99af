// Package httpsonly holds ratekey's rule for the URLs it fetches security
// material from (JWK Sets, trusted-proxy range lists): https, or plain http
// to a loopback host only (a local test server or sidecar). Anyone on the
// network path of a plain-http fetch could substitute the answer: keys that
// mint principals, or ranges whose hosts may name any client.
package httpsonly

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Check returns nil when u may be fetched: an https URL, or an http URL
// whose host is localhost, in 127.0.0.0/8 or ::1. Otherwise it returns an
// error saying why, which never quotes u (it may hold a password). It is a
// pure function of u, safe for concurrent use.
func Check(u *url.URL) error {
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if !loopback(u.Hostname()) {
			return errors.New("http is allowed only for loopback hosts; use https")
		}
		return nil
	}
	return fmt.Errorf("scheme %q is not https", u.Scheme)
}

func loopback(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
