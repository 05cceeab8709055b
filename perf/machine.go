// The machine a run happened on, recorded in results.json.

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/perf/internal/report"
)

// machineInfo describes this machine, and the commit of the checkout src
// xdpfwd is built from.
func machineInfo(src string) report.Machine {
	m := report.Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				m.MemGiB = kb / (1 << 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables"); err == nil {
		m.BridgeNF = strings.TrimSpace(string(b))
	}
	m.Commit = gitCommit(src)
	return m
}

// gitCommit names the checked-out commit of src, "-dirty" if the work tree
// has changes; "" if src is not a git work tree.
func gitCommit(src string) string {
	if src == "" {
		return ""
	}
	if _, err := os.Stat(filepath.Join(src, ".git")); err != nil {
		return ""
	}
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-C", src}, args...)...)
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "--short=12", "HEAD")
	if err != nil {
		return ""
	}
	if st, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		rev += "-dirty"
	}
	return rev
}
