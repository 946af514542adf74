// Command pause is the sandbox ("pause") container of the tests' Kubernetes
// cluster (internal/testenv/kubecluster): it holds the pod's namespaces
// open, reaps the zombies reparented to it (it is the pod's PID 1 when the
// pod shares its process namespace) and exits on SIGINT or SIGTERM. Built
// static, it is the whole image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-child:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
