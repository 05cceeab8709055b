package fwd_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// TestReplyWindowSavesWakeups: traffic at a low rate (one exchange a
// millisecond: the worker sleeps between them) through the fake. With the
// default spinner, request/response earns a reply window, and many answers
// go out without the worker sleeping since their request; with --spin 64
// (the default's short spin alone) it sleeps after most requests, the
// answer coming later than the spin. A one-way stream at the same rate
// earns no window. The answers come answerAfter after the request is out,
// from a goroutine polling for it, as an echo on a CPU of its own would
// send them; on a loaded machine some come too late for the window, so
// the default is held to a quarter of the answers, and to a fifth more
// than --spin 64. Counts, not times.
func TestReplyWindowSavesWakeups(t *testing.T) {
	const exchanges = 120
	const answerAfter = 60 * time.Microsecond
	run := func(t *testing.T, spin int, answered bool) (awake int, w fwd.WorkerStats) {
		r := startFake(t, fwd.Config{Spin: spin}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
		sleeps := func() uint64 { return r.f.WorkerStats()[0].Sleeps }
		next := time.Now()
		for i := range exchanges {
			time.Sleep(time.Until(next)) // the pace, not a wait for something
			next = time.Now().Add(time.Millisecond)
			r.inject(0, 0, seqFrame(macB, macA, 1, uint32(i), 98), fwdtest.RX{})
			catch(t, r.links[1], "request")
			if !answered {
				continue
			}
			before := sleeps()
			for start := time.Now(); time.Since(start) < answerAfter; {
				// The echo's work: longer than a short spin.
			}
			r.inject(1, 0, seqFrame(macA, macB, 2, uint32(i), 98), fwdtest.RX{})
			catch(t, r.links[0], "reply")
			if sleeps() == before {
				awake++
			}
		}
		w = r.f.WorkerStats()[0]
		t.Logf("%d of %d answers out without a sleep since their request; reply window %v, %d packets caught in it, %d sleeps", awake, exchanges, w.ReplyWindow, w.ReplyCaught, w.Sleeps)
		if w.Sleeps < exchanges/2 {
			t.Errorf("%d sleeps in %d exchanges a millisecond apart: the worker polled through the gaps", w.Sleeps, exchanges)
		}
		return awake, w
	}
	var off int
	t.Run("request/response, spin 64", func(t *testing.T) {
		var w fwd.WorkerStats
		off, w = run(t, 64, true)
		if off > exchanges/3 || w.ReplyWindow != 0 || w.ReplyCaught != 0 {
			t.Errorf("%d answers without a sleep, reply window %v, %d caught in it: want at most %d, and no window", off, w.ReplyWindow, w.ReplyCaught, exchanges/3)
		}
	})
	t.Run("request/response", func(t *testing.T) {
		awake, w := run(t, 0, true)
		if awake < exchanges/4 || awake < off+exchanges/5 || w.ReplyCaught == 0 {
			t.Errorf("%d answers without a sleep (%d with --spin 64), %d caught in a reply window: want %d and %d more than --spin 64, some caught", awake, off, w.ReplyCaught, exchanges/4, exchanges/5)
		}
	})
	t.Run("one-way stream", func(t *testing.T) {
		if _, w := run(t, 0, false); w.ReplyWindow != 0 || w.ReplyCaught != 0 {
			t.Errorf("reply window %v, %d packets caught in it: want none", w.ReplyWindow, w.ReplyCaught)
		}
	})
}

// catch waits for one frame out of l, polling without sleeping.
func catch(t *testing.T, l *fwdtest.Link, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(l.Collect()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %s out of %s in 5 s", what, l.Name())
		}
		runtime.Gosched()
	}
}
