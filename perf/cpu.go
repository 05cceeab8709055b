package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/perf/internal/report"
)

// userHZ is the unit of /proc/stat: USER_HZ, 100 on every Linux ABI.
const userHZ = 100

// cpuTimes is one /proc/stat snapshot: busy ticks of the whole machine and of
// each CPU. Busy is user+nice+system+irq+softirq+steal: everything but idle
// and iowait, so forwarding done in softirq counts wherever it runs.
type cpuTimes struct {
	at     time.Time
	busy   uint64
	total  uint64
	perCPU map[int]uint64
}

func readCPUTimes() (cpuTimes, error) {
	t := cpuTimes{at: time.Now(), perCPU: map[int]uint64{}}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		var v [8]uint64
		for i := range v {
			if i+1 < len(f) {
				v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
			}
		}
		busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7] // user nice system irq softirq steal
		if f[0] == "cpu" {
			t.busy, t.total = busy, busy+v[3]+v[4]
			continue
		}
		if n, err := strconv.Atoi(f[0][3:]); err == nil {
			t.perCPU[n] = busy
		}
	}
	if t.total == 0 {
		return t, errors.New("/proc/stat: no cpu line")
	}
	return t, nil
}

// busyNs is the machine's busy CPU time between two snapshots, in ns.
func busyNs(a, b cpuTimes) float64 {
	return float64(b.busy-a.busy) * 1e9 / userHZ
}

// busyPct is the busy share of cpu between two snapshots, in percent.
func busyPct(a, b cpuTimes, cpu int) float64 {
	s := b.at.Sub(a.at).Seconds()
	if s <= 0 {
		return 0
	}
	return float64(b.perCPU[cpu]-a.perCPU[cpu]) / userHZ / s * 100
}

// ownCPU measures the CPU time of what a measurement consists of: perf
// itself (all threads, getrusage), the forwarder process if there is one
// (its threads' schedstat run time) and the ksoftirqd threads (softirq work
// deferred out of any task's context). Without IRQ time accounting, softirq
// work done in a task's context (a sendmmsg that runs the veth's NAPI poll on
// its way out, say) is part of that task's run time. It leaves out other
// processes sharing the machine, which /proc/stat cannot.
type ownCPU struct {
	ksoftirqd []int
}

func newOwnCPU() *ownCPU {
	o := &ownCPU{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil && strings.HasPrefix(string(b), "ksoftirqd/") {
			o.ksoftirqd = append(o.ksoftirqd, pid)
		}
	}
	return o
}

// schedRuntime is the run time in ns of one task (/proc/<pid>/schedstat or
// /proc/<pid>/task/<tid>/schedstat).
func schedRuntime(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseUint(f[0], 10, 64)
	return v
}

// processRuntime sums the run time of every thread of pid.
func processRuntime(pid int) uint64 {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var sum uint64
	for _, e := range ents {
		sum += schedRuntime(filepath.Join(dir, e.Name(), "schedstat"))
	}
	return sum
}

// ns returns the CPU time so far of perf, of the process childPID (0:
// none) and of ksoftirqd, in ns.
func (o *ownCPU) ns(childPID int) float64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	t := float64(ru.Utime.Nano() + ru.Stime.Nano())
	if childPID > 0 {
		t += float64(processRuntime(childPID))
	}
	for _, pid := range o.ksoftirqd {
		t += float64(schedRuntime(filepath.Join("/proc", strconv.Itoa(pid), "schedstat")))
	}
	return t
}

// loadAvg is the 1-minute load average, -1 if unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

func cpuSet(cpus []int) unix.CPUSet {
	var s unix.CPUSet
	for _, c := range cpus {
		s.Set(c)
	}
	return s
}

func setCPUs(s unix.CPUSet) []int {
	var cpus []int
	for c := 0; c < len(s)*64; c++ {
		if s.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// pinProcess sets the affinity of every thread of this process. Threads
// created later inherit it from the thread that creates them, so a few
// passes over /proc/self/task catch the ones born during the first.
func pinProcess(s unix.CPUSet) error {
	for pass := 0; pass < 3; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &s); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity thread %d: %w", tid, err)
			}
		}
	}
	return nil
}

// onPinnedThread runs fn on an OS thread pinned to cpus. The thread is never
// unlocked, so the runtime discards it when fn returns and no other
// goroutine ever runs with its affinity. While fn runs, the runtime creates
// no new threads from it (a locked thread's new Ms come from the template
// thread), so the pin does not leak into perf's own threads either.
func onPinnedThread(cpus []int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		s := cpuSet(cpus)
		if err := unix.SchedSetaffinity(0, &s); err != nil {
			errc <- fmt.Errorf("sched_setaffinity %v: %w", cpus, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

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
