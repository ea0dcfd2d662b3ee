package e2e

import "syscall"

// sysProcAttr makes the kernel kill a child when the test binary dies (e.g.
// on a -timeout panic, where no t.Cleanup runs), so no adapter or Prometheus
// outlives the test holding ports and locks.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
