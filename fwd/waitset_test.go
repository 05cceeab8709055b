package fwd_test

import (
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestColdLinksWake: on the kernel's veths, a switch's links that fall
// quiet leave the sleep's poll for its epoll (cold), and a packet to or
// from one still gets through at once: a ping from host 0 to each host in
// turn (its request kicked out of a cold socket's TX ring, its reply
// waking the sleeping worker through the epoll) is answered, and the
// two sockets it passed are warmed.
func TestColdLinksWake(t *testing.T) {
	topo.RequireRoot(t)
	const hosts = 6
	h, f := runVethSwitch(t, hosts, 1)
	for _, l := range h.Links[2:] {
		if err := f.AddLink(l); err != nil {
			t.Fatalf("AddLink(%s): %v", l, err)
		}
	}
	for i := 1; i < hosts; i++ { // every host learned, its neighbour entry made
		if res, err := topo.Ping(h.NS[0], h.V4[i], 1, 2*time.Second); err != nil || res.Received != 1 {
			t.Fatalf("ping host %d: %+v %v", i, res, err)
		}
	}
	worker := func() fwd.WorkerStats { return f.WorkerStats()[0] }
	for i := 1; i < hosts; i++ {
		deadline := time.Now().Add(10 * time.Second)
		for worker().ColdSockets < hosts {
			if time.Now().After(deadline) {
				t.Fatalf("before the ping to host %d: %d cold sockets after 10 s, want %d: %+v", i, worker().ColdSockets, hosts, worker())
			}
			time.Sleep(10 * time.Millisecond)
		}
		before := worker()
		res, err := topo.Ping(h.NS[0], h.V4[i], 1, 2*time.Second)
		if err != nil || res.Received != 1 {
			t.Fatalf("ping host %d, its link cold: %+v %v", i, res, err)
		}
		// Warmed at the wake-up the epoll ended, or at the next sort
		// when the worker was awake.
		for worker().Warmings < before.Warmings+2 {
			if time.Now().After(deadline) {
				t.Fatalf("ping host %d: warmings %d -> %d, want 2 more (host 0's socket and host %d's)", i, before.Warmings, worker().Warmings, i)
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("host %d: RTT %v through cold links", i, res.RTT)
	}
	if w := worker(); w.ColdFailures != 0 {
		t.Errorf("%d sockets the epoll could not take", w.ColdFailures)
	}
}
