package fwd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

func sizes(lo, hi int) []int {
	var s []int
	for n := lo; n <= hi; n++ {
		s = append(s, n)
	}
	return s
}

// TestBytesEverySize sends one frame of every length from 60 to 1514 bytes
// each way (every inline/frame boundary, 255/256/257 included) and checks
// each arrives byte for byte, under several inline limits.
func TestBytesEverySize(t *testing.T) {
	for _, inlineMax := range []int{256, 128, fwd.InlineOff} {
		t.Run(fmt.Sprintf("inline-max=%d", inlineMax), func(t *testing.T) {
			p := newPair(t, topo.Options{})
			r := start(t, p, fwd.Config{InlineMax: inlineMax})
			all := sizes(60, 1514)
			for _, d := range []struct {
				name     string
				src, dst *topo.NS
			}{{"A→B", p.A, p.B}, {"B→A", p.B, p.A}} {
				res, err := topo.SendFrames(d.src, d.dst, all, 20*time.Second)
				if err != nil {
					t.Fatalf("%s: %v", d.name, err)
				}
				if res.Matched != len(all) {
					t.Errorf("%s: %d of %d sizes arrived intact; missing %v; altered %v", d.name, res.Matched, len(all), res.Missing, res.Mismatch)
				}
			}
			s := r.stop(t)
			inl := s.TXPaths["inline"]
			switch limit := max(inlineMax, 0); {
			case limit == 0 && inl != 0:
				t.Errorf("inline off, yet %d packets inline", inl)
			case limit > 0 && inl < uint64(2*(limit-60+1)):
				t.Errorf("inline limit %d: %d packets inline, want at least the %d test frames at or under it", limit, inl, 2*(limit-60+1))
			}
		})
	}
}

// TestBytesJumbo sends jumbo frames around every chunk boundary over MTU
// 9000 links, with multi-buffer, for each frag order.
func TestBytesJumbo(t *testing.T) {
	var js []int
	for _, b := range []int{1514, 1792, 2048, 3840, 4096, 5376, 6144, 7168, 8192, 9014} {
		for _, d := range []int{-1, 0, 1} {
			if n := b + d; n >= 1515 && n <= 9014 {
				js = append(js, n)
			}
		}
	}
	for _, order := range []int{-1, 3, 4} {
		for _, frame := range []int{2048, 4096} {
			t.Run(fmt.Sprintf("frame%d-order%d", frame, order), func(t *testing.T) {
				p := newPair(t, topo.Options{MTU: 9000})
				r := start(t, p, fwd.Config{FrameSize: frame, FragOrder: order, MultiBufferMode: fwd.MultiBufferOn})
				for _, d := range []struct {
					name     string
					src, dst *topo.NS
				}{{"A→B", p.A, p.B}, {"B→A", p.B, p.A}} {
					res, err := topo.SendFrames(d.src, d.dst, js, 20*time.Second)
					if err != nil {
						t.Fatalf("%s: %v", d.name, err)
					}
					if res.Matched != len(js) {
						t.Errorf("%s: %d of %d jumbo sizes intact; missing %v; altered %v", d.name, res.Matched, len(js), res.Missing, res.Mismatch)
					}
				}
				s := r.stop(t)
				t.Logf("paths %v, descriptors %d for %d packets", s.TXPaths, s.TXDescriptors, s.Links[p.LinkA].TXPackets+s.Links[p.LinkB].TXPackets)
				if order > 0 && frame == 2048 && s.TXPaths["frag"] == 0 {
					t.Errorf("no packet was repacked into a frag block: %v", s.TXPaths)
				}
			})
		}
	}
}
