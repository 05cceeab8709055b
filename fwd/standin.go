package fwd

import "sync/atomic"

// Standing in for a sleeping worker.
//
// A packet handed to the owner of its flow's TX queue (merge.go) would
// wait for the owner's wake-up when the owner sleeps in poll(2): tens of
// microseconds at a low rate, on every packet of a flow whose sender moves
// between CPUs. Instead the worker that handed it off runs the owner's
// side of the ordering in the owner's place (standIn): the owner's merge,
// reaps and kicks, on the owner's lanes, so the packet leaves at once and
// in the order the merge keeps. It wakes the owner only for what it could
// not send yet.
//
// Concurrency: the owner's lease says who may touch the owner's state,
// every part the loop alone writes otherwise (lanes, ordering, frame
// caches, capture). The owner holds it, except around ppoll(2), where it
// frees it after its last look at the rings and takes it back before it
// touches anything after the poll, waiting for a stand-in to finish. A
// stand-in takes a free lease with a compare-and-swap, never waits for
// one, and frees it when done: the lease's atomics order everything each
// holder wrote before the next holder reads it, so a TX ring still has one
// writer at a time. The kernel's side of the rings is unchanged: the poll
// may transmit from the TX ring while a stand-in fills it, as it would
// while a kick runs.

// lease states; the zero value is the owner's.
const (
	leaseHeld int32 = iota // the owner runs: nobody else touches its state
	leaseFree              // the owner sleeps in ppoll(2): a stand-in may take it
	leaseLent              // a stand-in runs in the owner's place
)

// lease is the right to run a worker's rounds; see above.
type lease struct{ state atomic.Int32 }

// free lets a stand-in take the lease; the owner, before ppoll(2).
func (l *lease) free() { l.state.Store(leaseFree) }

// reclaim takes the lease back; the owner, after ppoll(2). A stand-in
// holds it for one merge of what was handed off: it yields the CPU,
// which the stand-in may share, until then.
func (l *lease) reclaim() {
	for !l.state.CompareAndSwap(leaseFree, leaseHeld) {
		yield()
	}
}

// standIn runs w's side of the ordering in w's place, if w sleeps and
// its lease is free: what was handed to w and whose turn has come is sent
// on w's lanes and kicked, and what they completed reaped. It reports
// whether w can sleep on: false when w does not sleep, another holds its
// lease, or packets wait for their turn (w must then be woken).
func (w *worker) standIn() bool {
	if !w.wake.sleeping.Load() || !w.lease.state.CompareAndSwap(leaseFree, leaseLent) {
		return false
	}
	_, held := w.merge()
	w.reapAll()
	w.umems.publish()
	w.lanes.endRound(roundPollsOn, &w.rx)
	w.stoodIn.Add(1)
	w.lease.state.Store(leaseFree)
	return held == 0
}
