// Package txring owns the transmit side of one AF_XDP socket: its TX ring,
// which user space produces, and its completion ring, which the kernel
// produces. It batches descriptors, kicks the kernel only when the ring's
// need_wakeup flag asks for it (or the ring is full), and hands completed
// addresses back to the caller, which returns each to the zone it came
// from.
//
// # Concurrency
//
// A Ring has a single owner: one goroutine at a time calls Free, Reserve,
// Set, Cancel, Submit, Publish, Full, Flush, Owed, Polled, Kick, KickDown, Reap
// and InFlight, which keep unguarded counters
// and the xsk rings' cached indices. Other goroutines may read Kicks,
// KickErrors (atomics) and Pending (both indices loaded atomically). The
// socket's fill and RX rings are not the Ring's and may be owned by
// another goroutine.
//
// Both rings are shared with the kernel through xsk's index protocol:
// Submit publishes the descriptors written since Reserve with a release
// store of the TX producer index, after which the kernel may read their
// bytes at any time; Reap loads the completion producer index with acquire
// semantics and, once it has copied the addresses out, hands the entries
// back with a release store of the consumer index. An address passed to
// Set belongs to the kernel from Submit until Reap returns it.
//
// It never touches the bytes of a packet, never frees an address (the
// caller returns each to its zone), never allocates, never blocks, and
// makes no syscall per packet: Submit kicks only when the kernel asked for
// a wake-up (need_wakeup) or the ring is full, and Publish leaves every
// kick to the owner, who may make it once for several batches or let a
// poll(2) make it.
package txring

import (
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// Ring is the TX and completion ring pair of one socket.
type Ring struct {
	s    *xsk.Socket
	tx   *xsk.Producer
	comp *xsk.Consumer

	reserved  uint32 // reserved, not yet submitted
	submitted uint64
	completed uint64
	// owed: descriptors were published since the last Kick or Polled.
	owed bool

	// Kicks counts sendto calls; KickErrors those that failed (link
	// down). Atomic so a stats reader may load them while the owner runs.
	Kicks      atomic.Uint64
	KickErrors atomic.Uint64
}

// New wraps the TX side of s.
func New(s *xsk.Socket) *Ring {
	return &Ring{s: s, tx: &s.TX, comp: &s.Comp}
}

// Socket returns the socket the ring belongs to.
func (r *Ring) Socket() *xsk.Socket { return r.s }

// Free is how many descriptors could be reserved now.
func (r *Ring) Free(want uint32) uint32 { return r.tx.Free(want) }

// Reserve claims up to n descriptor slots; write them with Set, then call
// Submit. It returns how many it got and the first slot's index.
func (r *Ring) Reserve(n uint32) (got, idx uint32) {
	got, idx = r.tx.Reserve(n)
	r.reserved += got
	return got, idx
}

// Set writes the descriptor in a reserved slot.
func (r *Ring) Set(idx uint32, addr uint64, length uint32, options uint32) {
	r.tx.SetDesc(idx, xsk.Desc{Addr: addr, Len: length, Options: options})
}

// Cancel gives back the last n reserved slots unused.
func (r *Ring) Cancel(n uint32) {
	r.tx.Cancel(n)
	r.reserved -= n
}

// Submit publishes every reserved descriptor and kicks the kernel if it
// asked to be woken or the ring is now full: Publish, then Flush.
func (r *Ring) Submit() {
	r.Publish()
	r.Flush()
}

// Publish makes every reserved descriptor visible to the kernel without
// waking it. What it published is owed a wake-up (Owed) until the next
// Flush or Kick, or until the owner polls the socket (Polled): an owner
// that is about to sleep in poll(2) saves the sendto. When to kick is the
// owner's decision; a ring left Full needs one to make room.
func (r *Ring) Publish() {
	if r.reserved == 0 {
		return
	}
	r.tx.Submit(r.reserved)
	r.submitted += uint64(r.reserved)
	r.reserved = 0
	r.owed = true
}

// Full reports whether the TX ring has no free slot: only a kick makes
// the kernel take what it holds.
func (r *Ring) Full() bool { return r.tx.Free(1) == 0 }

// Flush kicks the kernel for what Publish left owed, if the ring's
// need_wakeup flag asks for it (KickDown to nothing pending).
func (r *Ring) Flush() error {
	if !r.owed {
		return nil
	}
	r.owed = false
	if !r.tx.NeedsWakeup() && r.tx.Free(1) != 0 {
		return nil
	}
	return r.KickDown(0)
}

// KickDown kicks the kernel while more than floor descriptors are pending
// and the last kick took some: a copy-mode kick transmits synchronously,
// but an older kernel only PollBudget descriptors per call. It returns
// the error of a failed sendto.
func (r *Ring) KickDown(floor uint32) error {
	for n := r.tx.Pending(); n > floor; {
		if err := r.Kick(true); err != nil {
			return err
		}
		m := r.tx.Pending()
		if m >= n {
			break
		}
		n = m
	}
	return nil
}

// Owed reports whether descriptors were published since the last kick or
// poll.
func (r *Ring) Owed() bool { return r.owed }

// Polled records that the owner polled the socket. poll(2) on an AF_XDP
// socket does what a sendto would for its TX ring while need_wakeup is
// set: it transmits in copy mode (at least PollBudget descriptors) and
// wakes the driver in zero-copy mode (net/xdp/xsk.c, xsk_poll). With the
// flag clear the driver needs no wake-up.
func (r *Ring) Polled() { r.owed = false }

// PollBudget is what a copy-mode kick or poll transmits from the TX ring
// at least: TX_BATCH_SIZE, what a kernel without XDP_MAX_TX_SKB_BUDGET
// sends per call (net/xdp/xsk.c); the rest waits for the next call. Where
// the kernel has the option, xsk raises the budget to the ring's size, so
// a call may send more, never less.
const PollBudget = 32

// Kick makes the sendto the kernel needs to process the TX ring, if its
// need_wakeup flag is set, the ring is full, or force is set. It returns
// the error of a failed sendto (ENETDOWN: the link is down).
func (r *Ring) Kick(force bool) error {
	r.owed = false
	if !force && !r.tx.NeedsWakeup() && r.tx.Free(1) != 0 {
		return nil
	}
	r.Kicks.Add(1)
	err := r.s.Kick()
	if err != nil {
		r.KickErrors.Add(1)
	}
	return err
}

// Reap copies up to len(buf) completed addresses into buf, releases them
// to the kernel and returns how many. The caller owns them from then on.
func (r *Ring) Reap(buf []uint64) int {
	n, idx := r.comp.Peek(uint32(len(buf)))
	for i := range n {
		buf[i] = r.comp.Addr(idx + i)
	}
	if n > 0 {
		r.comp.Release(n)
		r.completed += uint64(n)
	}
	return int(n)
}

// InFlight is the number of descriptors submitted and not yet reaped.
func (r *Ring) InFlight() uint64 { return r.submitted - r.completed }

// Pending is the number of submitted descriptors the kernel has not yet
// consumed from the TX ring.
func (r *Ring) Pending() uint32 { return r.tx.Pending() }

// Unsent appends to buf the addresses of the descriptors published on the
// TX ring that the kernel has not taken (state umem.KernelTX): what a
// socket taken out of service still holds once its completions are
// reaped, given back when it is closed.
func (r *Ring) Unsent(buf []uint64) []uint64 { return r.s.TX.Outstanding(buf, true) }
