package redistest

import (
	"github.com/ratekey/ratekey/internal/prefetchbooks"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// Prefetch returns l's prefetch books: counters and the tokens it holds
// now (all zero when prefetch is off).
func Prefetch(l *rkredis.Limiter) prefetchbooks.Books { return prefetchbooks.Of(l) }

// AddPrefetch returns the field-by-field sum of a and b: the prefetch
// books of several Limiters (several processes) taken together.
func AddPrefetch(a, b prefetchbooks.Books) prefetchbooks.Books { return prefetchbooks.Add(a, b) }
