package fwd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestStalled, on a real forwarder: a worker whose loop stops going round
// while its RX ring holds packets is reported; one that moves again, or a
// running forwarder, is not; a closed one reports nothing (its rings are
// gone).
func TestStalled(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	t.Run("wedged", func(t *testing.T) {
		f, err := New(Config{Links: []string{p.LinkA, p.LinkB}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if s := f.Stalled(0); s != nil {
			t.Fatalf("Stalled before any round: %v", s)
		}
		// Not running: as if the worker went round once and then hung.
		w := f.workers[0]
		w.progress.rounds.Store(1)
		if s := f.Stalled(0); s != nil {
			t.Fatalf("Stalled with empty RX rings: %v", s)
		}
		// A ping from A: its ARP requests land on LinkA's RX ring, and
		// nobody takes them off.
		pinged := make(chan struct{})
		go func() {
			defer close(pinged)
			topo.Ping(p.A, p.V4B, 1, time.Second)
		}()
		defer func() { <-pinged }()
		deadline := time.Now().Add(10 * time.Second)
		for !w.rx.pending() {
			if time.Now().After(deadline) {
				t.Fatal("nothing arrived on the RX rings within 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		f.Stalled(0) // the first call with packets waiting starts the clock
		s := f.Stalled(0)
		if len(s) != 1 || !strings.Contains(s[0], "worker 0") || !strings.Contains(s[0], "RX") {
			t.Fatalf("Stalled(0) with packets waiting and no round since: %q, want worker 0 named", s)
		}
		t.Logf("reported: %q", s)
		if s := f.Stalled(time.Hour); s != nil {
			t.Errorf("Stalled(1h) after a moment: %v", s)
		}
		w.progress.rounds.Add(1)
		if s := f.Stalled(0); s != nil {
			t.Errorf("Stalled after the worker moved again: %v", s)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if s := f.Stalled(0); s != nil {
			t.Errorf("Stalled after Close: %v", s)
		}
	})

	t.Run("running", func(t *testing.T) {
		f, err := New(Config{Links: []string{p.LinkA, p.LinkB}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		defer func() {
			cancel()
			<-done
			f.Shutdown()
		}()
		// The worker loop counts its rounds: Stalled sees them.
		deadline := time.Now().Add(10 * time.Second)
		for f.workers[0].progressCount() < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the worker made no round within 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		for range 20 {
			if r, err := topo.Ping(p.A, p.V4B, 1, 3*time.Second); err != nil || r.Received == 0 {
				t.Fatalf("ping across: %d/%d, %v", r.Received, r.Sent, err)
			}
			// An hour cannot pass between two calls of this loop.
			if s := f.Stalled(time.Hour); s != nil {
				t.Fatalf("Stalled while forwarding: %v", s)
			}
		}
		f.Stop()
		if s := f.Stalled(0); s != nil {
			t.Errorf("Stalled once stopping: %v", s)
		}
	})
}
