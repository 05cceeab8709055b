// Package fwd is xdpfwd's forwarding engine: it joins two links through
// AF_XDP sockets on one shared UMEM and moves every frame received on one
// out of the other, unchanged, without copying it in user space.
//
// It owns, for the life of a Forwarder, the UMEM region, the XDP programs
// on both links, one socket per (link, queue) and one worker per queue
// index. Worker q owns both links' sockets for queue q: their four rings
// each have that single user-space producer or consumer, so no ring is
// ever shared between goroutines.
//
// It must never leave an XDP program or a socket behind: New tears down
// whatever it built when it fails, Close releases everything, and the XDP
// programs are held by BPF links so the kernel removes them if the process
// dies without running Close.
package fwd
