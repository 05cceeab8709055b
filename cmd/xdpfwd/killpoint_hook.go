//go:build xdpfwdtest

package main

import (
	"os"
	"strings"
	"syscall"
	"time"
)

// killPoint SIGKILLs the daemon, in a binary built with the xdpfwdtest tag
// (the tests build one; the daemon shipped reads no such variable), after
// the handover step XDPFWD_KILL_AFTER names, as an OOM kill or a crash
// there would; or stalls it there for the duration XDPFWD_STALL_AFTER
// gives after the step's name and a colon ("predecessor-frozen:300ms"),
// as a starved CPU would.
func killPoint(step string) {
	if os.Getenv("XDPFWD_KILL_AFTER") == step {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	if s, d, ok := strings.Cut(os.Getenv("XDPFWD_STALL_AFTER"), ":"); ok && s == step {
		if d, err := time.ParseDuration(d); err == nil {
			time.Sleep(d)
		}
	}
}
