//go:build xdpfwdcnitest

package main

import (
	"os"
	"syscall"
)

// killPoint SIGKILLs the plugin when step is XDPFWD_CNI_KILL_AFTER, as a
// runtime's timeout or an OOM kill would: the tests' way to stop an ADD
// between any two of its steps. Only a binary built with the
// xdpfwdcnitest tag has it (the tests build one); the plugin shipped does
// not read the variable.
func killPoint(step string) {
	if os.Getenv("XDPFWD_CNI_KILL_AFTER") == step {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
