package fwd_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/umem"
)

// TestVethLinksWhileForwarding: on the kernel's veths, a switch between
// hosts 0 and 1 has hosts 2 and 3 added and removed 20 times while host 0
// pings host 1 without pause: every ping is answered, an added host is
// reached through the switch, and everything comes back at Close. The
// ping RTT's p50 and p99 during the cycles and without them (the same run)
// are logged. With one worker, and with two on veths of two queues (the
// links' handoff rings then join both workers).
func TestVethLinksWhileForwarding(t *testing.T) {
	topo.RequireRoot(t)
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d-workers", workers), func(t *testing.T) { vethLinksWhileForwarding(t, workers) })
	}
}

func vethLinksWhileForwarding(t *testing.T, workers int) {
	h, f := runVethSwitch(t, 4, workers)
	if res, err := topo.Ping(h.NS[0], h.V4[1], 3, 5*time.Second); err != nil || res.Received == 0 {
		t.Fatalf("ping 0 → 1 before any change: %+v %v", res, err)
	}
	pings := func(n int, until func() bool) (rtts []time.Duration, lost int) {
		for i := 0; i < n || until != nil && !until(); i++ {
			res, err := topo.Ping(h.NS[0], h.V4[1], 1, time.Second)
			if err != nil || res.Received != 1 {
				lost++
				continue
			}
			rtts = append(rtts, res.RTT)
		}
		return rtts, lost
	}
	base, baseLost := pings(2000, nil)

	var cycling sync.WaitGroup
	var stopped sync.Mutex
	finished := false
	var cycleErr error
	reached := 0
	cycling.Go(func() {
		defer func() { stopped.Lock(); finished = true; stopped.Unlock() }()
		for c := range 20 {
			for _, l := range h.Links[2:] {
				if err := f.AddLink(l); err != nil {
					cycleErr = err
					return
				}
			}
			if c%5 == 0 {
				// An added host is reached through the switch.
				if res, err := topo.Ping(h.NS[2], h.V4[0], 1, 2*time.Second); err == nil && res.Received == 1 {
					reached++
				}
			}
			for _, l := range h.Links[2:] {
				if err := f.RemoveLink(l); err != nil {
					cycleErr = err
					return
				}
			}
		}
	})
	during, duringLost := pings(100, func() bool { stopped.Lock(); defer stopped.Unlock(); return finished })
	cycling.Wait()
	if cycleErr != nil {
		t.Fatalf("add/remove: %v", cycleErr)
	}
	if baseLost != 0 || duringLost != 0 {
		t.Errorf("pings 0 → 1 lost: %d of %d without changes, %d of %d during 20 add/remove cycles", baseLost, len(base)+baseLost, duringLost, len(during)+duringLost)
	}
	if reached != 4 {
		t.Errorf("an added host reached host 0 in %d of 4 tries", reached)
	}
	if got := f.Links(); !slices.Equal(got, []string{h.Links[0], h.Links[1], "", ""}) {
		t.Errorf("Links() after the cycles: %q", got)
	}
	t.Logf("ping RTT without changes: p50 %v p99 %v (%d pings); during 20 add/remove cycles of two links: p50 %v p99 %v (%d pings)",
		pct(base, 50), pct(base, 99), len(base), pct(during, 50), pct(during, 99), len(during))
}

// TestVethRemoveFirstLink: on the kernel's veths, the link whose first
// socket registered the UMEM is removed; the UMEM lives on in the other
// sockets (the kernel holds it for each), a link added then binds sharing
// one of them, and the first link comes back: pings cross the switch at
// each step, and every frame comes back at Close.
func TestVethRemoveFirstLink(t *testing.T) {
	topo.RequireRoot(t)
	h, f := runVethSwitch(t, 3, 1)
	ping := func(from, to int) {
		t.Helper()
		if res, err := topo.Ping(h.NS[from], h.V4[to], 3, 5*time.Second); err != nil || res.Received != 3 {
			t.Fatalf("ping %d → %d, links %q: %+v %v", from, to, f.Links(), res, err)
		}
	}
	ping(0, 1)
	if err := f.RemoveLink(h.Links[0]); err != nil {
		t.Fatalf("RemoveLink(first): %v", err)
	}
	if err := f.AddLink(h.Links[2]); err != nil {
		t.Fatalf("AddLink after the first link's removal: %v", err)
	}
	ping(2, 1)
	if err := f.AddLink(h.Links[0]); err != nil {
		t.Fatalf("AddLink(first) again: %v", err)
	}
	ping(0, 1)
	ping(0, 2)
}

// runVethSwitch runs a switch between the first two of n hosts on veths
// (of workers queues, as many workers), able to take the others; at the
// test's end Run must have returned nil, Close too, and every UMEM
// address come back.
func runVethSwitch(t *testing.T, n, workers int) (*topo.Hosts, *fwd.Forwarder) {
	t.Helper()
	h, err := topo.NewHosts(n, topo.Options{Queues: workers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	f, err := fwd.New(fwd.Config{Links: h.Links[:2], Handler: modes.NewSwitch(2, 1024, time.Minute), MaxLinks: n, Queues: workers, NoPin: true, HugePages: umem.HugePagesOff})
	if err != nil {
		t.Fatalf("fwd.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	// Before the hosts' cleanup (registered earlier, run later).
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := f.Leaked(); n != 0 {
			t.Errorf("Leaked() = %d after the links' adds and removes, want 0", n)
		}
	})
	return h, f
}

// pct is the p-th percentile of d.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
