//go:build !unix

package adaptive

import "time"

// cpuTime is 0 where getrusage is not available: no cpu-ns/op is reported.
func cpuTime() time.Duration { return 0 }
