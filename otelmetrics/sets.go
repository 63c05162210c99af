package otelmetrics

import (
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// options is one attribute set as the options a measurement takes, built
// once: passing a kept slice on, the request path allocates no slice and
// no set.
type options struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// sets keeps the options of each attribute combination K met so far. Its
// map is copied on write and read without a lock: combinations come from
// bounded, operator-controlled sets (policies, decisions, stores, fixed
// reasons), so writes stop early and every later read is a map lookup.
type sets[K comparable] struct {
	mu    sync.Mutex // serialises writers
	m     atomic.Pointer[map[K]options]
	attrs func(K) attribute.Set
}

// get returns k's options, building them on first use. Safe for
// concurrent use.
func (s *sets[K]) get(k K) options {
	if m := s.m.Load(); m != nil {
		if o, ok := (*m)[k]; ok {
			return o
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var next map[K]options
	if old := s.m.Load(); old != nil {
		if o, ok := (*old)[k]; ok {
			return o
		}
		next = maps.Clone(*old)
	} else {
		next = map[K]options{}
	}
	opt := metric.WithAttributeSet(s.attrs(k))
	o := options{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
	next[k] = o
	s.m.Store(&next)
	return o
}
