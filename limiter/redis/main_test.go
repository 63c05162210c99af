package redis_test

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// quiet drops go-redis's internal log lines (dial failures in the fault
// tests); test failures say what matters.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv("RATEKEY_REDIS_LOG") == "" {
		goredis.SetLogger(quiet{})
	}
	os.Exit(m.Run())
}
