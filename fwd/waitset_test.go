package fwd_test

import (
	"context"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestColdLinksWake: on the kernel's veths, a switch's links that fall
// quiet leave the sleep's poll for its epoll (cold), and a packet to or
// from one still gets through at once: a ping from host 0 to each host in
// turn (its request kicked out of a cold socket's TX ring, its reply
// waking the sleeping worker through the epoll) is answered, and the
// two sockets it passed are warmed; so is one from a cold host while
// host 0 floods another.
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
	// In a flood from host 0 to host 1, a cold host's packet is read all
	// the same (every few rounds, the worker never sleeping).
	deadline := time.Now().Add(10 * time.Second)
	for worker().ColdSockets < hosts {
		if time.Now().After(deadline) {
			t.Fatalf("before the flood: %d cold sockets after 10 s, want %d", worker().ColdSockets, hosts)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mac, err := h.NS[1].HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	var g *gen.Generator
	if err := h.NS[0].Do(func() (err error) {
		g, err = gen.New(gen.Config{Links: []string{"eth0"}, Sizes: []int{64}, Count: 200_000, Rate: 200e3,
			Template: gen.Template{SrcIP: h.V4[0], DstPort: 9, DstHosts: []gen.Host{{MAC: mac, IP: h.V4[1]}}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	flood := make(chan error, 1)
	start := f.LinkStats(0).RXPackets
	go func() { flood <- g.Run(context.Background()) }()
	for f.LinkStats(0).RXPackets < start+10_000 {
		if time.Now().After(deadline) {
			t.Fatalf("the flood did not start: %d packets from host 0", f.LinkStats(0).RXPackets-start)
		}
		time.Sleep(time.Millisecond)
	}
	res, err := topo.Ping(h.NS[hosts-1], h.V4[0], 1, 2*time.Second)
	during := f.LinkStats(0).RXPackets < start+200_000
	if err := <-flood; err != nil {
		t.Fatalf("generator: %v", err)
	}
	if err != nil || res.Received != 1 {
		t.Fatalf("ping from host %d, its link cold, during a flood: %+v %v", hosts-1, res, err)
	}
	t.Logf("during a flood (ping done before its end: %v): RTT %v from a cold link", during, res.RTT)
	if w := worker(); w.ColdFailures != 0 {
		t.Errorf("%d sockets the epoll could not take", w.ColdFailures)
	}
}
