// Package xdpprog holds the XDP programs perf loads itself — the kernel
// contenders (the in-kernel redirect, the XDP_TX reflector), the
// baseline's XDP_DROP, the reflect workload's counter of returned frames —
// and attaches them through BPF links, which the kernel removes if perf
// dies. It also finds an XDP program a contender left on a link.
//
// It never chooses where a program goes or what a contender is: the
// contenders do, and close what they attached.
package xdpprog
