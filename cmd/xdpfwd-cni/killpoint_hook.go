//go:build xdpfwdcnitest

package main

import (
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

// killPoint stops ADD between two of its steps, in a binary built with
// the xdpfwdcnitest tag (the tests build one; the plugin shipped reads
// none of these variables):
//
//   - XDPFWD_CNI_PAUSE_AFTER=step: the plugin writes its PID to the file
//     XDPFWD_CNI_PAUSE_PIDFILE names and stops itself (SIGSTOP), so that
//     the test can change the world between two steps (delete the pod's
//     namespace, as a runtime tearing the sandbox down does) before it
//     sends SIGCONT;
//   - XDPFWD_CNI_KILL_AFTER=step: the plugin SIGKILLs itself, as a
//     runtime's timeout or an OOM kill would.
func killPoint(step string) {
	if os.Getenv("XDPFWD_CNI_PAUSE_AFTER") == step {
		file := os.Getenv("XDPFWD_CNI_PAUSE_PIDFILE")
		// Whole or absent: the test reads it as soon as it is there.
		if os.WriteFile(file+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600) == nil && os.Rename(file+".tmp", file) == nil {
			// The stop reaches the threads when each next looks at its
			// signals, this goroutine's maybe not at once: it waits for
			// the SIGCONT that ends the stop, so ADD goes on only then.
			cont := make(chan os.Signal, 1)
			signal.Notify(cont, syscall.SIGCONT)
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			<-cont
			signal.Stop(cont)
		}
	}
	if os.Getenv("XDPFWD_CNI_KILL_AFTER") == step {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
