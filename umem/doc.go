// Package umem owns the premapped packet memory of an xdpfwd process: one
// mmap'd region, registered once with the kernel as an AF_XDP UMEM, carved
// into zones of fixed-size units (RX frames, 256-byte inline TX slots, and
// 32/64 KiB frag blocks). Several regions may share one mapping, back to
// back (NewSpace): UMEMs registered apart (one bound in zero-copy mode,
// one in copy mode) whose addresses never overlap, so that one address
// names one byte of any of them. Only the rings see a region's own
// offsets (package xsk translates).
//
// The region is the user-space counterpart of a driver's premapped,
// coherent DMA zone, the fix Eric Dumazet proposes for IOMMU costs in
// "[RFC net] tcp: Fix performance regression for request-response
// workloads" (netdev, 2022): it is mapped (and, in zero-copy mode,
// DMA-mapped) once for the life of the process, so no packet ever pays for
// a mapping.
//
// Every unit of every zone is, at any moment, in exactly one place: free (in
// the zone's pool or a worker's cache), with the kernel on the RX side (fill
// ring, kernel, RX ring), held by a worker, or with the kernel on the TX side
// (TX ring, kernel, completion ring). Zones record each unit's place in a
// one-byte state so that a unit handed out twice or freed twice is caught and
// counted, and Region.Check proves after traffic stops that nothing leaked.
//
// # Concurrency
//
// A Region is set up by one goroutine (New, NewCache, NewPacker) before
// workers start, and torn down after they stop (Reclaim, ReclaimReferenced,
// Check, Counts, InUse, Close). In between:
//
//   - a Cache, and a Packer, belong to one goroutine at a time; the zone's
//     pool behind them is guarded by a mutex, taken once per batch of half
//     a cache, never per unit;
//   - a unit's state byte is written only by the unit's current owner
//     (Alloc, Free, Zone.Move) — in xdpfwd, package rxring on the receive
//     side and the forwarding engine's TX layout code; ownership passes from one worker to another
//     through the kernel's rings, or a caller's own single-producer ring,
//     whose release/acquire indices order the writes, so a unit may be
//     allocated by one worker and freed into another worker's cache;
//   - a frag block's descriptor count is atomic: the worker that reaped a
//     completion releases it through its own Packer on the same zone;
//   - FreeUnits (from the pool and the levels caches Publish), Violations
//     and a PageMeter's readings are safe from any goroutine; a PageMeter
//     has one writer.
//
// The region is shared with the kernel once registered (xsk.Open): the
// kernel writes received packets into frames on its RX side and reads
// TX descriptors' bytes on its TX side. A unit in state KernelRX or
// KernelTX must not be read or written until it comes back on a ring.
//
// The package never talks to the kernel's rings itself, makes no syscall
// between New and Close, and never allocates on the alloc/free path: an
// exhausted zone is reported (ok == false), never waited for. Close unmaps
// the region, so the sockets bound to it must be closed first.
package umem
