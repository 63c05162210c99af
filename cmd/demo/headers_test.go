package main

import (
	"net/http"
	"net/http/httptest"
)

// headerRequest returns a request carrying h, what an
// identity.Authenticator reads.
func headerRequest(h http.Header) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header = h
	return r
}
