//go:build linux

package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the server if the test process dies first, so a
// crashed or killed test binary leaves no redis-server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
