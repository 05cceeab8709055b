// What one process has spent so far: CPU time by mode and its threads'
// context switches, from /proc/PID.

package measure

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ).
const clockTick = 100

// ProcCost is one reading of a process's CPU time and context switches.
type ProcCost struct {
	OK           bool    // /proc/PID/stat was read
	VCS, NCS     float64 // voluntary and involuntary context switches, all threads
	UTime, STime float64 // user and system CPU, seconds
}

// ReadProcCost reads the process pid's costs so far; OK is false if it
// is gone.
func ReadProcCost(pid int) ProcCost {
	var pc ProcCost
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	if b, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 12 {
				u, _ := strconv.ParseFloat(f[11], 64)
				s, _ := strconv.ParseFloat(f[12], 64)
				pc.UTime, pc.STime, pc.OK = u/clockTick, s/clockTick, true
			}
		}
	}
	tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			switch k {
			case "voluntary_ctxt_switches":
				pc.VCS += n
			case "nonvoluntary_ctxt_switches":
				pc.NCS += n
			}
		}
	}
	return pc
}
