// Package cpulist reads and writes CPU lists as the kernel and taskset
// spell them ("0-3,8"): the daemon's --cpus, the CNI plugin's "rpsCPUs",
// perf's --load-cpus. It owns the syntax only, never what a list means
// to its caller (an order of workers, a set of CPUs).
package cpulist

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxCPU bounds a CPU number: the kernel's largest NR_CPUS is 8192. It
// also bounds the list a range can make.
const MaxCPU = 8191

// Parse reads comma-separated CPUs and inclusive ranges, in the order
// given and each as often as given (--cpus pins worker q to the q-th);
// spaces and a trailing newline around items are ignored. An empty list
// is an error.
func Parse(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no CPU")
	}
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		switch {
		case err != nil || a < 0:
			return nil, fmt.Errorf("%q: not a CPU or a range of them", part)
		case b < a:
			return nil, fmt.Errorf("%q: a range must go up", part)
		case b > MaxCPU:
			return nil, fmt.Errorf("%q: CPU %d above %d", part, b, MaxCPU)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// Format writes sorted cpus as the kernel writes a CPU list, runs as
// ranges: "0-3,8"; "none" for none (a mask of 0).
func Format(cpus []int) string {
	if len(cpus) == 0 {
		return "none"
	}
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			fmt.Fprintf(&b, "-%d", cpus[j])
		}
		i = j + 1
	}
	return b.String()
}
