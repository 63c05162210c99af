//go:build !linux

package redistest

import "os/exec"

// setDeathSignal does nothing outside Linux: t.Cleanup stops the server.
func setDeathSignal(*exec.Cmd) {}
