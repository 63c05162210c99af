package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// ms is a readable shorthand for milliseconds.
const ms = time.Millisecond

// lim returns a Limit of count tokens per period with burst b.
func lim(count int64, per time.Duration, b int64) limiter.Limit {
	return limiter.Limit{Rate: limiter.Rate{Count: count, Per: per}, Burst: b}
}

func mustTake(t *testing.T, l *Limiter, reqs ...limiter.Request) []limiter.Decision {
	t.Helper()
	d, err := l.Take(context.Background(), nil, reqs)
	if err != nil {
		t.Fatalf("Take(%+v): %v", reqs, err)
	}
	return d
}

func mustPeek(t *testing.T, l *Limiter, reqs ...limiter.Request) []limiter.Decision {
	t.Helper()
	d, err := l.Peek(context.Background(), nil, reqs)
	if err != nil {
		t.Fatalf("Peek(%+v): %v", reqs, err)
	}
	return d
}

// remaining returns the whole tokens in key's bucket now (a cost-1 Peek
// reports them after the hypothetical charge, hence the +1 when allowed).
func remaining(t *testing.T, l *Limiter, key string, li limiter.Limit) int64 {
	t.Helper()
	d := mustPeek(t, l, limiter.Request{Key: key, Limit: li, Cost: 1})[0]
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

func isCapacity(err error) bool { return errors.Is(err, limiter.ErrCapacity) }
