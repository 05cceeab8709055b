// CPU time: the machine's busy time by CPU (/proc/stat) and the time of
// what a measurement consists of (OwnCPU).

package measure

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc/stat: USER_HZ, 100 on every Linux ABI.
const userHZ = 100

// CPUTimes is one /proc/stat snapshot: busy ticks of the whole machine and of
// each CPU. Busy is user+nice+system+irq+softirq+steal: everything but idle
// and iowait, so forwarding done in softirq counts wherever it runs.
type CPUTimes struct {
	At     time.Time // when it was read
	busy   uint64
	total  uint64
	perCPU map[int]uint64
}

// CPUs is the number of CPUs the snapshot has a line for.
func (t CPUTimes) CPUs() int { return len(t.perCPU) }

// ReadCPUTimes reads /proc/stat.
func ReadCPUTimes() (CPUTimes, error) {
	t := CPUTimes{At: time.Now(), perCPU: map[int]uint64{}}
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

// BusyNs is the machine's busy CPU time between two snapshots, in ns.
func BusyNs(a, b CPUTimes) float64 {
	return float64(b.busy-a.busy) * 1e9 / userHZ
}

// BusyPct is the busy share of cpu between two snapshots, in percent.
func BusyPct(a, b CPUTimes, cpu int) float64 {
	s := b.At.Sub(a.At).Seconds()
	if s <= 0 {
		return 0
	}
	return float64(b.perCPU[cpu]-a.perCPU[cpu]) / userHZ / s * 100
}

// OwnCPU measures the CPU time of what a measurement consists of: perf
// itself (all threads, getrusage), the forwarder process if there is one
// (its threads' schedstat run time) and the ksoftirqd threads (softirq work
// deferred out of any task's context). Without IRQ time accounting, softirq
// work done in a task's context (a sendmmsg that runs the veth's NAPI poll on
// its way out, say) is part of that task's run time. It leaves out other
// processes sharing the machine, which /proc/stat cannot.
type OwnCPU struct {
	ksoftirqd []int
}

// NewOwnCPU finds the ksoftirqd threads, whose time NS adds.
func NewOwnCPU() *OwnCPU {
	o := &OwnCPU{}
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

// ProcessRuntime sums the run time of every thread of pid.
func ProcessRuntime(pid int) uint64 {
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
func (o *OwnCPU) NS(childPID int) float64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	t := float64(ru.Utime.Nano() + ru.Stime.Nano())
	if childPID > 0 {
		t += float64(ProcessRuntime(childPID))
	}
	for _, pid := range o.ksoftirqd {
		t += float64(schedRuntime(filepath.Join("/proc", strconv.Itoa(pid), "schedstat")))
	}
	return t
}

// LoadAvg is the 1-minute load average, -1 if unknown.
func LoadAvg() float64 {
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
