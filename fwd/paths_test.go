package fwd_test

import (
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestPathsBySize checks which TX path UDP traffic takes by size, and that
// the inline zone cuts the pages 64-byte traffic touches.
func TestPathsBySize(t *testing.T) {
	// The subtests compare their results: without root they skip, and
	// this would compare nothing.
	topo.RequireRoot(t)
	type result struct {
		inlineShare float64
		pages4k     float64
	}
	run := func(t *testing.T, inlineMax, payload int) result {
		p := newPair(t, topo.Options{})
		r := start(t, p, fwd.Config{InlineMax: inlineMax})
		u, err := topo.UDPBurst(p.A, p.B, p.V4B, 20000, payload, 20*time.Second)
		if err != nil {
			t.Fatalf("UDP %d B: %v", payload, err)
		}
		s := r.stop(t)
		lb := s.Links[p.LinkB]
		var total uint64
		for _, v := range lb.TXPaths {
			total += v
		}
		res := result{inlineShare: float64(lb.TXPaths["inline"]) / float64(total), pages4k: s.PagesPer1KDesc["4k"]}
		t.Logf("inline-max %d, %d-byte payload: %d/%d received; paths %v; fallbacks %d; pages per 1k desc %v",
			inlineMax, payload, u.Received, u.Sent, lb.TXPaths, lb.InlineFallbacks, s.PagesPer1KDesc)
		return res
	}
	var on, off result
	t.Run("64B-inline", func(t *testing.T) {
		on = run(t, 256, 64-42)
		if on.inlineShare < 0.99 {
			t.Errorf("64-byte frames: %.1f%% inline, want ≥ 99%%", 100*on.inlineShare)
		}
	})
	t.Run("64B-inline-off", func(t *testing.T) {
		off = run(t, fwd.InlineOff, 64-42)
		if off.inlineShare != 0 {
			t.Errorf("inline off: %.1f%% inline", 100*off.inlineShare)
		}
	})
	t.Run("1400B", func(t *testing.T) {
		r := run(t, 256, 1400-42)
		if r.inlineShare > 0.01 { // ARP and the like may go inline
			t.Errorf("1400-byte frames: %.1f%% inline, want ~0%%", 100*r.inlineShare)
		}
	})
	if on.pages4k == 0 || off.pages4k == 0 {
		t.Fatalf("page meter did not run: on %v off %v", on.pages4k, off.pages4k)
	}
	t.Logf("4 KiB pages touched per 1,000 descriptors, 64-byte traffic: inline %.1f, frames %.1f (%.0f× fewer)", on.pages4k, off.pages4k, off.pages4k/on.pages4k)
	if off.pages4k < 8*on.pages4k {
		t.Errorf("inline zone cut pages per 1k descriptors only %.1f× (%.1f → %.1f), want ≥ 8×", off.pages4k/on.pages4k, off.pages4k, on.pages4k)
	}
}
