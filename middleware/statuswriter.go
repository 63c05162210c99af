package middleware

import (
	"bufio"
	"net"
	"net/http"
)

// statusWriter is an http.ResponseWriter that notes the status of the
// response it passes on: what an adaptive cap needs to tell a handler's
// client error from an answer whose latency counts (see serveTimed). It
// keeps the optional interfaces handlers use: Flush and Hijack through
// http.ResponseController, Unwrap for the rest.
type statusWriter struct {
	http.ResponseWriter
	status int // the final status written, 0 before (200 once the body starts)
}

// WriteHeader notes code when it is the final status (not 1xx).
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write notes 200 when the body starts without a status.
func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush flushes the underlying writer, when it can.
func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack hijacks the underlying connection, when it can (else an error
// wrapping http.ErrNotSupported).
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
