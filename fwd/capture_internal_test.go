package fwd

import (
	"fmt"
	"testing"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// TestCaptureHandedOff: a packet one worker hands to another for its TX
// queue is recorded by what becomes of it, once: sent (TX, on the owner's
// queue) when the owner's merge puts it on the TX ring, dropped (tx_full)
// when the merge drops it, dropped (dropped_at_stop) when the forwarder
// closes with it still waiting; never as sent at the handoff.
func TestCaptureHandedOff(t *testing.T) {
	tests := []struct {
		name string
		then func(g *mergeRig)
		want string // the records, "link/queue/dir/reason"
	}{
		{"sent", func(g *mergeRig) { g.w[1].draining = true; g.merge(1) }, "[1/1/tx/]"},
		{"tx full", func(g *mergeRig) {
			g.w[1].handler = HandlerFunc(func([]Packet) {})
			g.port(1, 1).quietUntil = 1 // its link down: the merge drops
			for g.port(1, 1).tx.Free(1) > 0 {
				_, i := g.port(1, 1).tx.Reserve(1)
				g.port(1, 1).tx.Set(i, g.frame("filler"), 60, 0)
			}
			g.w[1].draining = true
			g.merge(1)
		}, "[1/1/drop/tx_full]"},
		{"stop", func(g *mergeRig) { g.w[1].dropHandoffs() }, "[1/1/drop/dropped_at_stop]"},
		{"handoff full", nil, "[1/0/drop/handoff_full]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newMergeRig(t, 2, 64)
			hub := capture.NewHub(2, []string{"a", "b"})
			for q, w := range g.w {
				w.tap.point = hub.Point(q)
			}
			sess, err := hub.Open(capture.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			// Worker 0 reads a packet on link 0 queue 0 whose flow is on
			// TX queue 1 of link 1: worker 1's.
			w := g.w[0]
			in, out := g.port(0, 0), g.port(1, 0)
			if tc.then == nil {
				// The handoff ring already full.
				for in.out[1][1].room() > 0 {
					g.hand(0, 0, 1, "filler", 0, 1)
				}
			}
			w.tap.set = w.tap.point.Begin()
			w.out = make([]xsk.Desc, linearize.MaxDescs)
			w.out[0] = xsk.Desc{Addr: g.frame("p"), Len: 60}
			w.sendOne(in, out, 1, 1, xps.NoSlot, 0, 60, 1, &rxBatch{merging: true})
			w.order.publish(in)
			w.tapEnd()
			if tc.then != nil {
				tc.then(g)
			}
			var got []string
			sess.Read(100, func(rec []byte) bool {
				r, _ := capture.Parse(rec)
				reason := ""
				if r.Dir == capture.Drop {
					reason = capture.ReasonNames()[r.Reason]
				}
				got = append(got, fmt.Sprintf("%d/%d/%v/%s", r.Link, r.Queue, r.Dir, reason))
				return true
			})
			if fmt.Sprint(got) != tc.want {
				t.Errorf("records %v, want %s", got, tc.want)
			}
		})
	}
}
