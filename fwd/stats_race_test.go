package fwd_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// TestStatsReadersRaceClose reads a forwarder's stats from another
// goroutine, as a metrics scrape does, while Close tears it down: under
// -race nothing may be reported, and once Close returned the readers get
// zero values instead of what a closed socket would say. On the fake
// environment: no root.
func TestStatsReadersRaceClose(t *testing.T) {
	env := fwdtest.New()
	env.AddLink("a", fwdtest.LinkOptions{})
	env.AddLink("b", fwdtest.LinkOptions{})
	f, err := fwd.New(fwd.Config{Links: []string{"a", "b"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	started := make(chan struct{})
	wg.Go(func() {
		close(started)
		for !stop.Load() {
			for i := range 2 {
				f.LinkStats(i)
				f.QueueStats(i, 0)
				f.KernelStats(i, 0)
			}
			f.Summary()
			f.Zones()
			f.XPS()
			f.Stalled(0)
			reads.Add(1)
		}
	})
	<-started
	for reads.Load() < 3 {
		// Let the reader get going so that Close overlaps it.
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	stop.Store(true)
	wg.Wait()

	for i := range 2 {
		ls := f.LinkStats(i)
		if ls.XDPMode != "" || ls.BindMode != "" || ls.RXPackets != 0 || ls.Queues != 0 {
			t.Errorf("LinkStats(%d) after Close: mode %q/%q, %d rx packets, %d queues; want zero values", i, ls.XDPMode, ls.BindMode, ls.RXPackets, ls.Queues)
		}
		if s := f.Stalled(0); s != nil {
			t.Errorf("Stalled after Close: %v", s)
		}
		if _, err := f.KernelStats(i, 0); err == nil {
			t.Errorf("KernelStats(%d, 0) after Close: no error", i)
		}
	}
}
