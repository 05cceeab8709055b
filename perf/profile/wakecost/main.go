// Command wakecost measures what one sleep in ppoll(2) and its wake-up
// from another CPU cost in CPU time on this machine, the price a
// user-space forwarder pays per wake-up (perf/README.md): two
// threads pinned to CPUs 0 and 1 ping-pong through eventfds, each sleeping
// in ppoll between turns, 50,000 round trips.
//
//	go run ./perf/profile/wakecost
package main

import (
	"fmt"
	"log"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func pin(cpu int) {
	runtime.LockOSThread()
	var s unix.CPUSet
	s.Set(cpu)
	unix.SchedSetaffinity(0, &s)
}

func main() {
	const n = 50000
	a, err := unix.Eventfd(0, unix.EFD_NONBLOCK)
	if err != nil {
		log.Fatalf("eventfd: %v", err)
	}
	b, err := unix.Eventfd(0, unix.EFD_NONBLOCK)
	if err != nil {
		log.Fatalf("eventfd: %v", err)
	}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	buf := make([]byte, 8)
	done := make(chan struct{})
	wait := func(fd int) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			unix.Ppoll(pfd, nil, nil)
			if _, err := unix.Read(fd, buf); err == nil {
				return
			}
		}
	}
	var ru0, ru1 syscall.Rusage
	go func() {
		pin(1)
		for i := 0; i < n; i++ {
			wait(b)
			unix.Write(a, one)
		}
		close(done)
	}()
	pin(0)
	time.Sleep(100 * time.Millisecond)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t := time.Now()
	for i := 0; i < n; i++ {
		unix.Write(b, one)
		wait(a)
	}
	el := time.Since(t)
	<-done
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	fmt.Printf("round trip %v wall; process CPU per sleep+wake (two per round trip, with the write that wakes and the read): %v\n", el/n, cpu/(2*n))
}
