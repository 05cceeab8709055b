package fwd_test

// Arrival stamps and the ordering they give flows read on several
// queues, on the fake environment.

import (
	"sync"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/xps"
)

// TestFakeMergeOrder: with two RX and two TX queues a flow whose packets
// arrive on both RX queues is handed off to its TX queue's owner and
// leaves in arrival (stamp) order, however the workers read them, once the
// fake clock passes the watermark slack; nothing before.
func TestFakeMergeOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  fwdtest.LinkOptions
	}{
		{"native", fwdtest.LinkOptions{Queues: 2}},                 // last stamps: caught up
		{"generic", fwdtest.LinkOptions{Queues: 2, Generic: true}}, // slack only
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fwd.Config{Queues: 2, XPS: xps.ModeSticky}
			r := startFake(t, cfg, tc.opt, tc.opt)
			if r.f.Queues() != 2 {
				t.Fatalf("%d queues, want 2", r.f.Queues())
			}
			const n = 64
			start := r.env.Now()
			// The odd packets on queue 1 first: read first, sent last.
			for _, q := range []int{1, 0} {
				for i := q; i < n; i += 2 {
					r.inject(0, q, seqFrame(macB, macA, 7, uint32(i), 100), fwdtest.RX{Stamp: start + int64(i)*1000})
				}
			}
			soon(t, "all received", func() bool { return r.f.LinkStats(0).RXPackets == n })
			time.Sleep(5 * time.Millisecond) // the clock stands: nothing may go
			if got := r.links[1].Collect(); len(got) != 0 {
				t.Fatalf("%d packets sent before the clock passed their turn", len(got))
			}
			r.env.Advance(time.Millisecond)
			got := r.links[1].CollectN(n, 5*time.Second)
			if len(got) != n {
				t.Fatalf("%d packets out, want %d", len(got), n)
			}
			for i, g := range got {
				if s := seqOf(g.Data); s != uint32(i) || g.Queue != got[0].Queue {
					t.Fatalf("packet %d out: seq %d on TX queue %d, want seq %d on %d (one flow, one queue, arrival order)", i, s, g.Queue, i, got[0].Queue)
				}
			}
			if s := r.f.LinkStats(0); s.OrderHoldTimeouts != 0 || s.TotalDrops() != 0 {
				t.Errorf("hold timeouts %d drops %v, want none", s.OrderHoldTimeouts, s.Drops)
			}
		})
	}
}

// TestFakeHandlerArrival: a Handler sees in Packet.Arrival the stamp the
// program wrote in front of each frame, with one queue (where the batch
// reads no clock) and with several (where the ordering takes the stamp).
func TestFakeHandlerArrival(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queues int
	}{{"one-queue", 1}, {"two-queues", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[uint32]int64{}
			h := fwd.HandlerFunc(func(pkts []fwd.Packet) {
				mu.Lock()
				defer mu.Unlock()
				for i := range pkts {
					got[seqOf(pkts[i].Data)] = pkts[i].Arrival
					pkts[i].Drop()
				}
			})
			r := startFake(t, fwd.Config{Handler: h, Queues: tc.queues}, fwdtest.LinkOptions{Queues: tc.queues})
			start := r.env.Now()
			const n = 40
			for i := range n {
				r.inject(0, i%tc.queues, seqFrame(macB, macA, uint16(i%tc.queues), uint32(i), 100), fwdtest.RX{Stamp: start + int64(i)*1000 + 7})
			}
			r.received(0, n)
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				if want := start + int64(i)*1000 + 7; got[uint32(i)] != want {
					t.Errorf("packet %d: Arrival %d, want the program's stamp %d", i, got[uint32(i)], want)
				}
			}
		})
	}
}

// TestFakeStampsWhereRead: the program stamps arrivals only where they are
// read: with several workers (the merge orders by them) or a Handler
// (Packet.Arrival); a cross-connect with one worker forwards unstamped
// packets, which the merge never sees.
func TestFakeStampsWhereRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   fwd.Config
		links int
		want  bool
	}{
		{"cross-connect, one worker", fwd.Config{Queues: 1}, 1, false},
		{"cross-connect, two workers", fwd.Config{Queues: 2}, 2, true},
		{"handler, one worker", fwd.Config{Handler: modes.Reflect, Queues: 1}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []fwdtest.LinkOptions{{Queues: tc.links}, {Queues: tc.links}}
			if tc.cfg.Handler != nil {
				opts = opts[:1]
			}
			r := startFake(t, tc.cfg, opts...)
			for i, l := range r.links {
				if got := l.Program().Stamps(); got != tc.want {
					t.Errorf("link %d: program stamps %v, want %v", i, got, tc.want)
				}
			}
			const n = 20
			for i := range n {
				r.inject(0, i%tc.links, seqFrame(macB, macA, uint16(i%tc.links), uint32(i), 100), fwdtest.RX{})
			}
			soon(t, "all received", func() bool { return r.f.LinkStats(0).RXPackets == n })
			r.env.Advance(time.Millisecond) // past the merge's watermark slack
			out := r.links[len(r.links)-1]  // the other link; the one a reflector sends back on
			if got := out.CollectN(n, 5*time.Second); len(got) != n {
				t.Fatalf("%d of %d frames out", len(got), n)
			}
		})
	}
}
