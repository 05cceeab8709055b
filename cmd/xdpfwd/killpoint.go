//go:build !xdpfwdtest

package main

// killPoint is where a test build (killpoint_hook.go) may kill or stall
// the daemon between two steps of a handover; in this build it does
// nothing.
func killPoint(step string) {}
