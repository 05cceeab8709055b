package gen

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now is CLOCK_MONOTONIC in ns, the clock of the XDP program's
// bpf_ktime_get_ns and of another process's Now: the generator's TX stamps
// and a sink's arrival times compare across processes on one machine. It
// reads the vDSO through the runtime's monotonic clock (no syscall): the
// offset between the two is measured once.
func Now() int64 { return base + int64(time.Since(ref)) }

var ref, base = calibrate()

// calibrate pairs a time.Now with CLOCK_MONOTONIC read around it, keeping
// the tightest of a few tries (under a µs apart on an idle machine).
func calibrate() (time.Time, int64) {
	var best time.Time
	var off, width int64 = 0, -1
	for range 8 {
		var a, b unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		t := time.Now()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		w := b.Nano() - a.Nano()
		if width < 0 || w < width {
			best, off, width = t, a.Nano()+w/2, w
		}
	}
	return best, off
}
