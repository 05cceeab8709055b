// Package traffic makes the load perf sends through every contender:
// UDP senders (sendmmsg, paced or not, over one flow or many; xdpfwd's
// txonly generator; sequenced flows alternating between two queues; the
// reflect workload's AF_XDP sender), receivers that count and check order,
// an echo, TCP bulk streams and request/response transactions with a
// latency histogram, and the CPU pinning of the threads that run them.
//
// It counts only what it sends and receives itself; it never starts or
// stops a contender, changes a link or reads another process's counters.
// Every generator is bounded by a deadline and a packet count, so none
// outlives a sample, and Close stops it.
package traffic
