package fwd_test

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// TestCadenceSavesWakeups: one-way packets through the fake, one every
// 2 ms, find the default worker polling for them (it slept until just
// before each was due): many are caught in its window, each a wake-up
// saved, and it still sleeps between them. Packets at irregular
// intervals (0.5 to 3.5 ms), bursts of 16 every 2 ms (a paced stream,
// over which a wake-up is spread), or --spin 64, earn no window. The
// pace is the test's own sleeps, late by a loaded machine's scheduling
// now and then, so the steady stream is held to an eighth caught.
// Counts, not times.
func TestCadenceSavesWakeups(t *testing.T) {
	const packets = 150
	run := func(t *testing.T, spin, burst int, every func() time.Duration) fwd.WorkerStats {
		r := startFake(t, fwd.Config{Spin: spin}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
		next := time.Now()
		for i := range packets {
			time.Sleep(time.Until(next)) // the pace, not a wait for something
			next = time.Now().Add(every())
			for k := range burst {
				r.inject(0, 0, seqFrame(macB, macA, 1, uint32(i*burst+k), 98), fwdtest.RX{})
			}
			for got, deadline := 0, time.Now().Add(5*time.Second); got < burst; got += len(r.links[1].Collect()) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of a burst of %d out of %s in 5 s", got, burst, r.links[1].Name())
				}
				runtime.Gosched()
			}
		}
		w := r.f.WorkerStats()[0]
		t.Logf("%d of %d packets caught in a cadence window; %d sleeps, %d polls", w.CadenceCaught, packets, w.Sleeps, w.Polls)
		if w.Sleeps < packets/2 {
			t.Errorf("%d sleeps for %d packets 0.5 ms or more apart: the worker polled through the gaps", w.Sleeps, packets)
		}
		return w
	}
	t.Run("every 2 ms", func(t *testing.T) {
		if w := run(t, 0, 1, func() time.Duration { return 2 * time.Millisecond }); w.CadenceCaught < packets/8 {
			t.Errorf("%d of %d packets caught in a window, want at least %d", w.CadenceCaught, packets, packets/8)
		}
	})
	t.Run("irregular", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		every := func() time.Duration { return time.Duration(500+rng.IntN(3000)) * time.Microsecond }
		if w := run(t, 0, 1, every); w.CadenceCaught > packets/20 {
			t.Errorf("%d of %d irregular packets caught in a window, want at most %d", w.CadenceCaught, packets, packets/20)
		}
	})
	t.Run("bursts of 16", func(t *testing.T) {
		if w := run(t, 0, 16, func() time.Duration { return 2 * time.Millisecond }); w.CadenceCaught != 0 {
			t.Errorf("bursts of 16: %d caught in a window, want none", w.CadenceCaught)
		}
	})
	t.Run("spin 64", func(t *testing.T) {
		if w := run(t, 64, 1, func() time.Duration { return 2 * time.Millisecond }); w.CadenceCaught != 0 {
			t.Errorf("--spin 64: %d caught in a window, want none", w.CadenceCaught)
		}
	})
}
