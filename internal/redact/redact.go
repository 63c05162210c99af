// Package redact renders URLs for error messages and logs without the
// parts that may hold a secret: the user information (a password) and the
// query (an access key or token, as many JWKS and IP-range endpoints
// take). ratekey's fetchers (trustedproxy.URLSource, the JWK Set fetcher)
// name their URL through it.
package redact

import (
	"errors"
	"net/url"
	"strings"
)

// URL returns raw without its user information, query and fragment (which
// a fetch never sends); a dropped query shows as "?…" so that the reader
// knows one was there. A raw URL that does
// not parse is shown as "(unparsable URL)", since the parser's error would
// quote it whole. Safe for concurrent use.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.Fragment, u.RawFragment = nil, "", ""
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "", false
		return u.String() + "?…"
	}
	return u.String()
}

// Error redacts, with [URL], the URL of every *url.Error in err's chain,
// withholds the text of its cause when that may quote a URL too (it holds
// a "?", an "@" or a "#"; errors.Is and errors.As still see the cause), and
// returns err. net/http's Client.Do returns its errors as a *url.Error
// whose text holds the request URL with only the password masked, so a
// fetcher passes them through Error before returning or logging them. It
// changes the *url.Error values in place, so call it on an error nobody
// else holds, before wrapping it: the one just returned by Client.Do (a
// wrapper made by fmt.Errorf keeps the text of the moment it was made).
// nil gives nil.
func Error(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ue, ok := e.(*url.Error); ok {
			ue.URL = URL(ue.URL)
			// The cause may quote a URL too (an unparsable Location
			// header of a redirect): its text is withheld then.
			if ue.Err != nil && strings.ContainsAny(ue.Err.Error(), "?@#") {
				ue.Err = withheld{ue.Err}
			}
		}
	}
	return err
}

// withheld is an error whose text may quote a URL: it prints a placeholder
// and keeps the error in its chain for errors.Is and errors.As.
type withheld struct{ err error }

func (w withheld) Error() string { return "(details withheld: they quote a URL)" }
func (w withheld) Unwrap() error { return w.err }
