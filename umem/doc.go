// Package umem owns the premapped packet memory of an xdpfwd process: one
// mmap'd region, registered once with the kernel as an AF_XDP UMEM, carved
// into zones of fixed-size units (RX frames, 256-byte inline TX slots, and
// 32/64 KiB frag blocks).
//
// The region is the user-space counterpart of a driver's premapped,
// coherent DMA zone: it is mapped (and, in zero-copy mode, DMA-mapped) once
// for the life of the process, so no packet ever pays for a mapping.
//
// Every unit of every zone is, at any moment, in exactly one place: free (in
// the zone's pool or a worker's cache), with the kernel on the RX side (fill
// ring, kernel, RX ring), held by a worker, or with the kernel on the TX side
// (TX ring, kernel, completion ring). Zones record each unit's place in a
// one-byte state so that a unit handed out twice or freed twice is caught and
// counted, and Region.Check proves after traffic stops that nothing leaked.
//
// The package never talks to the kernel's rings itself and never allocates
// on the alloc/free path.
package umem
