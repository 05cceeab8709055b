package fwd

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// workerProgress tells a worker that is wedged (a syscall that never
// returns, a loop that never ends) from one that is merely idle: an idle
// worker still goes round its loop, at least once per poll timeout.
type workerProgress struct {
	// rounds counts the rounds of the worker's loop; only the worker
	// writes it.
	rounds atomic.Uint64

	// Stalled's view, from one call to the next.
	mu    sync.Mutex
	seen  uint64    // rounds at the last call
	since time.Time // when rounds last moved or the RX rings were last empty
}

// progressCount is the number of rounds w's loop has made.
func (w *worker) progressCount() uint64 { return w.progress.rounds.Load() }

// pending reports whether any of the RX rings holds packets the worker
// has not released. Safe from any goroutine while the sockets are open.
func (r *rxSide) pending() bool {
	for _, p := range r.ports {
		if !p.rx.Empty() {
			return true
		}
	}
	return false
}

// Stalled names the workers that made no progress (no round of their
// loop) for at least d while packets waited on their RX rings. It measures
// from one call to the next, so call it periodically, as a health check
// does: a stall shows from the first call at least d after the last one
// that saw progress. Nil before a worker's first round, once the forwarder
// is stopping and after Close.
func (f *Forwarder) Stalled(d time.Duration) []string {
	// teardown.mu: the RX rings are unmapped by Close.
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	if f.closedLocked() || f.Stopping() {
		return nil
	}
	now := time.Now()
	var out []string
	for k, w := range f.workers {
		n := w.progressCount()
		if n == 0 {
			continue // not started
		}
		p := &w.progress
		p.mu.Lock()
		if n != p.seen || p.since.IsZero() || !w.rx.pending() {
			p.seen, p.since = n, now
		} else if stuck := now.Sub(p.since); stuck >= d {
			out = append(out, fmt.Sprintf("worker %d: no progress for %v with packets waiting on its RX rings",
				k, stuck.Round(time.Millisecond)))
		}
		p.mu.Unlock()
	}
	return out
}
