package gen

import "golang.org/x/sys/unix"

func monotonicRaw() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
