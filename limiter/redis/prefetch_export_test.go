package redis

import "github.com/ratekey/ratekey/internal/prefetchbooks"

// PrefetchStats is a Limiter's prefetch books.
type PrefetchStats = prefetchbooks.Books

// Prefetch returns l's prefetch counters and the tokens it holds now.
func Prefetch(l *Limiter) PrefetchStats { return l.prefetchBooks() }
