package fwd

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/xdpfwd/xdpfwd/xps"
)

// handoffBytes builds the handoff rings New builds for links links of rxq
// RX queues each on workers workers (with a Handler, so every link may
// send to every link, as the switch does) and returns what their entries
// take.
func handoffBytes(t *testing.T, links, rxq, workers int, ringSize uint32) (bytes, rings, entries int) {
	t.Helper()
	cfg := Plan{Queues: workers, RingSize: ringSize, Handler: HandlerFunc(func([]Packet) {})}
	li := make([]linkInfo, links)
	for i := range li {
		li[i] = linkInfo{rxQueues: rxq, txQueues: rxq}
	}
	f := &Forwarder{plan: cfg, links: li, handler: cfg.Handler, ports: make([][]*port, links),
		flows: &flowState{table: xps.NewTable(8, 0)}}
	for i := range f.ports {
		for q := range rxq {
			f.ports[i] = append(f.ports[i], &port{link: i, queue: q})
		}
	}
	for q := range workers {
		f.workers = append(f.workers, &worker{q: q, wake: &waker{fd: -1}})
	}
	size, err := handoffRingSize(&cfg, li)
	if err != nil {
		return 0, 0, 0
	}
	setupOrdering(f, size)
	for _, w := range f.workers {
		for _, hs := range w.flows.order.in {
			for _, h := range hs {
				rings++
				entries += len(h.ents)
			}
		}
	}
	return entries * int(unsafe.Sizeof(handoffEntry{})), rings, entries / max(rings, 1)
}

// TestHandoffMemoryBounded: the handoff rings, one per (RX socket, output
// link, worker), number links² × RX queues × workers in switch mode; their
// entries stay within handoffBudget in all, whatever the shape, and a
// shape that would need more at the smallest ring is refused at start
// (handoffRingSize; New returns it as an InputError, exit 2).
func TestHandoffMemoryBounded(t *testing.T) {
	for _, c := range []struct {
		links, rxq, workers int
		ring                uint32
	}{
		{2, 2, 2, 2048},
		{4, 2, 2, 1024},
		{16, 4, 4, 256},
		{64, 1, 2, 64},
		{64, 2, 2, 64},
		{64, 2, 2, MaxRingSize},
		{64, 8, 2, 64},
	} {
		b, rings, per := handoffBytes(t, c.links, c.rxq, c.workers, c.ring)
		t.Logf("%d links × %d RX queues × %d workers, ring size %d: %d rings of %d entries, %d MiB", c.links, c.rxq, c.workers, c.ring, rings, per, b>>20)
		if b > handoffBudget {
			t.Errorf("%d links × %d RX queues × %d workers, ring size %d: handoff rings take %d MiB, over the %d MiB bound",
				c.links, c.rxq, c.workers, c.ring, b>>20, handoffBudget>>20)
		}
		if rings > 0 && per < handoffMinRing {
			t.Errorf("%d links × %d RX queues × %d workers: rings of %d entries, fewer than %d", c.links, c.rxq, c.workers, per, handoffMinRing)
		}
	}
	cfg := Plan{Queues: 2, RingSize: 64, Handler: HandlerFunc(func([]Packet) {})}
	li := make([]linkInfo, 64)
	for i := range li {
		li[i] = linkInfo{rxQueues: 64, txQueues: 64}
	}
	if _, err := handoffRingSize(&cfg, li); err == nil {
		t.Error("64 links × 64 RX queues × 2 workers: accepted, want refused (the rings would exceed the bound)")
	} else {
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Errorf("refusal %v is not an InputError", err)
		}
		t.Logf("refused: %v", err)
	}
}
