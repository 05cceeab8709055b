//go:build !xdpfwdcnitest

package main

// killPoint is where a test build (killpoint_hook.go) may kill or pause
// the plugin between two steps of ADD; in this build it does nothing.
func killPoint(step string) {}
