// Package measure reads the counters perf's figures are made of: CPU time
// (/proc/stat, the schedstat run time of perf, a forwarder and ksoftirqd),
// a process's CPU time by mode and context switches (/proc/PID), a link's
// driver statistics and queue counts (ethtool), and xdpfwd's Prometheus
// metrics.
//
// It only reads: it never starts, stops or configures anything, and it
// turns no counter into a figure (the workloads subtract the readings of
// a window's two ends and divide).
package measure
