// CPU placement of perf's own threads: the generators and receivers run
// on the load CPUs, apart from the forwarder's.

package traffic

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// CPUSet is the affinity mask of cpus.
func CPUSet(cpus []int) unix.CPUSet {
	var s unix.CPUSet
	for _, c := range cpus {
		s.Set(c)
	}
	return s
}

// CPUsOf lists the CPUs of the mask s.
func CPUsOf(s unix.CPUSet) []int {
	var cpus []int
	for c := 0; c < len(s)*64; c++ {
		if s.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// PinProcess sets the affinity of every thread of this process. Threads
// created later inherit it from the thread that creates them, so a few
// passes over /proc/self/task catch the ones born during the first.
func PinProcess(s unix.CPUSet) error {
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

// OnPinnedThread runs fn on an OS thread pinned to cpus. The thread is never
// unlocked, so the runtime discards it when fn returns and no other
// goroutine ever runs with its affinity. While fn runs, the runtime creates
// no new threads from it (a locked thread's new Ms come from the template
// thread), so the pin does not leak into perf's own threads either.
func OnPinnedThread(cpus []int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		s := CPUSet(cpus)
		if err := unix.SchedSetaffinity(0, &s); err != nil {
			errc <- fmt.Errorf("sched_setaffinity %v: %w", cpus, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
