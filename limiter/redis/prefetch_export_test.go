package redis

// Prefetch returns l's prefetch counters and the tokens it holds now.
func Prefetch(l *Limiter) PrefetchStats { return l.PrefetchStats() }
