// Package logtest is an slog.Handler for tests that keeps each record as
// one line of text: its level, message and attributes ("ERROR msg k=v"),
// so that a test can compare what was logged with the lines it expects.
package logtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Lines is an slog.Handler that keeps every record it handles, at every
// level, as "LEVEL message key=value ...". The zero value is ready to
// use; it is safe for concurrent use.
type Lines struct {
	mu    sync.Mutex
	lines []string
}

// Enabled reports true: every level is kept.
func (l *Lines) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns l: the attributes of a logger's With are not kept.
func (l *Lines) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns l: groups are not kept.
func (l *Lines) WithGroup(string) slog.Handler { return l }

// Handle keeps r as one line.
func (l *Lines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	return nil
}

// Get returns the lines kept so far, in order.
func (l *Lines) Get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}
