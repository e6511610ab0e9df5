// Command pause is the CI cluster's pod sandbox ("pause") image: it holds a
// pod's namespaces open, reaps orphans, and exits on SIGTERM or SIGINT.
// There is no registry to pull registry.k8s.io/pause from, so the CI
// builds this static binary and imports it as a FROM-scratch image into
// containerd (see start.sh).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
