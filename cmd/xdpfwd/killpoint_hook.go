//go:build xdpfwdtest

package main

import (
	"os"
	"syscall"
)

// killPoint SIGKILLs the daemon, in a binary built with the xdpfwdtest tag
// (the tests build one; the daemon shipped reads no such variable), after
// the handover step XDPFWD_KILL_AFTER names, as an OOM kill or a crash
// there would.
func killPoint(step string) {
	if os.Getenv("XDPFWD_KILL_AFTER") == step {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
