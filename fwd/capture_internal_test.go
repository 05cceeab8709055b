package fwd

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// TestCaptureHandedOff: a packet one worker hands to another for its TX
// queue is recorded by what becomes of it, once: sent (TX, on the owner's
// queue) when the owner's merge puts it on the TX ring, dropped (tx_full)
// when the merge drops it, dropped (dropped_at_stop) when the forwarder
// closes with it still waiting; never as sent at the handoff. The same
// fate is counted, once, on the lane it was bound for, and a dropped
// packet's frame is free again.
func TestCaptureHandedOff(t *testing.T) {
	tests := []struct {
		name   string
		then   func(g *mergeRig)
		want   string // the records, "link/queue/dir/reason"
		counts string // the lanes' nonzero counters, "link/queue:counter=n"
	}{
		{"sent", func(g *mergeRig) { g.w[1].flows.draining = true; g.merge(1) }, "[1/1/tx/]", "[1/1:tx_packets=1]"},
		{"tx full", func(g *mergeRig) {
			g.w[1].verdicts.handler = HandlerFunc(func([]Packet) {})
			g.port(1, 1).tx.quietUntil = 1 // its link down: the merge drops
			for g.port(1, 1).tx.free(1) > 0 {
				g.port(1, 1).tx.put([]xsk.Desc{{Addr: g.frame("filler"), Len: 60}})
			}
			g.w[1].flows.draining = true
			g.merge(1)
		}, "[1/1/drop/tx_full]", "[1/1:" + DropTXFull + "=1]"},
		{"stop", func(g *mergeRig) { g.w[1].dropHandoffs() }, "[1/1/drop/dropped_at_stop]", "[1/1:" + DropAtStop + "=1]"},
		{"handoff full", nil, "[1/0/drop/handoff_full]", "[1/0:" + DropHandoffFull + "=1]"},
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
			in := g.port(0, 0)
			if tc.then == nil {
				// The handoff ring already full.
				for in.out[1][1].room() > 0 {
					g.hand(0, 0, 1, "filler", 0, 1)
				}
			}
			w.tap.set = w.tap.point.Begin()
			p := g.frame("p")
			tx := []xsk.Desc{{Addr: p, Len: 60}}
			b := rxBatch{merging: true}
			w.emit(in, 1, txChoice{tq: 1, slot: xps.NoSlot}, tx, 60, &b)
			w.flows.order.publish(in)
			w.tapEnd()
			w.lanes.publishTouched() // as finish does
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
			var counts []string
			for link := range 2 {
				for q := range 2 {
					s := &g.port(link, q).stats
					for _, c := range []struct {
						name string
						v    uint64
					}{
						{"tx_packets", s.load(cTXPackets)},
						{DropTXFull, s.load(cDrops + count(dropTXFull))},
						{DropAtStop, s.load(cDrops + count(dropAtStop))},
						{DropHandoffFull, s.load(cDrops + count(dropHandoffFull))},
						{DropTXNoRoom, s.load(cDrops + count(dropNoRoom))},
					} {
						if c.v != 0 {
							counts = append(counts, fmt.Sprintf("%d/%d:%s=%d", link, q, c.name, c.v))
						}
					}
				}
			}
			if fmt.Sprint(counts) != tc.counts {
				t.Errorf("counted %v, want %s", counts, tc.counts)
			}
			want := umem.Free
			if tc.name == "sent" {
				want = umem.KernelTX
			}
			if st := g.region.Frames.StateOf(p); st != want {
				t.Errorf("the packet's frame is %v, want %v", st, want)
			}
		})
	}
}

// TestAbandonReceived: a packet dropped before it was laid out, on either
// batch path, is counted by its reason on the link it came in on,
// recorded by a capture as dropped with that reason, and its frame goes
// back to the fill ring.
func TestAbandonReceived(t *testing.T) {
	verdict := func(v func(p *Packet)) Handler {
		return HandlerFunc(func(ps []Packet) {
			for i := range ps {
				v(&ps[i])
			}
		})
	}
	ipv4 := func(mem []byte, a uint64, claim uint16) {
		binary.BigEndian.PutUint16(mem[a+12:], 0x0800)
		mem[a+14] = 0x45
		binary.BigEndian.PutUint16(mem[a+16:], claim)
	}
	tests := []struct {
		name    string
		handler Handler
		claim   uint16 // IPv4 total length written into the 60-byte frame; 0: not IP
		want    string // the record, "link/queue/dir/reason"
		counter string
	}{
		{"handler drops", verdict((*Packet).Drop), 0, "[0/0/drop/handler_drops]", DropHandler},
		{"flood to its own link only", verdict(func(p *Packet) { p.Flood(LinkSet(0).Add(0)) }), 0, "[0/0/drop/handler_drops]", DropHandler},
		{"spoofed source", verdict(func(p *Packet) { p.DropFor(CauseSpoofedSource) }), 0, "[0/0/drop/spoofed_source]", DropSpoofedSource},
		{"spoofed IP", verdict(func(p *Packet) { p.DropFor(CauseSpoofedIP) }), 0, "[0/0/drop/spoofed_ip]", DropSpoofedIP},
		{"a drop after a forward", verdict(func(p *Packet) { p.Forward(1); p.Drop() }), 0, "[0/0/drop/handler_drops]", DropHandler},
		{"truncated, cross-connect", nil, 1000, "[0/0/drop/rx_truncated]", DropRXTruncated},
		{"truncated, handler", verdict(func(p *Packet) { p.Forward(1) }), 1000, "[0/0/drop/rx_truncated]", DropRXTruncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newMergeRig(t, 2, 64)
			hub := capture.NewHub(2, []string{"a", "b"})
			g.w[0].tap.point = hub.Point(0)
			sess, err := hub.Open(capture.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			w := g.ready(0, tc.handler)
			in := g.port(0, 0)
			a := g.arrive(0, 0, g.now-usec(5))
			if tc.claim != 0 {
				ipv4(g.region.Mem(), a, tc.claim)
			}
			if n := w.forward(in); n != 1 {
				t.Fatalf("forward: %d packets, want 1", n)
			}
			var got []string
			sess.Read(100, func(rec []byte) bool {
				r, _ := capture.Parse(rec)
				if r.Dir == capture.Drop {
					got = append(got, fmt.Sprintf("%d/%d/%v/%s", r.Link, r.Queue, r.Dir, capture.ReasonNames()[r.Reason]))
				}
				return true
			})
			if fmt.Sprint(got) != tc.want {
				t.Errorf("drop records %v, want %s", got, tc.want)
			}
			counted := map[string]uint64{
				DropHandler:       in.stats.load(cDrops + count(dropHandler)),
				DropRXTruncated:   in.stats.load(cDrops + count(dropTruncated)),
				DropSpoofedSource: in.stats.load(cDrops + count(dropSpoofedSource)),
				DropSpoofedIP:     in.stats.load(cDrops + count(dropSpoofedIP)),
			}
			for name, v := range counted {
				if want := map[bool]uint64{true: 1}[name == tc.counter]; v != want {
					t.Errorf("%s on link 0 queue 0: %d, want %d", name, v, want)
				}
			}
			if st := g.region.Frames.StateOf(a); st != umem.KernelRX {
				t.Errorf("the packet's frame is %v, want %v (back on the fill ring)", st, umem.KernelRX)
			}
			if v := g.region.Frames.Violations(); v != 0 {
				t.Errorf("%d ownership violations", v)
			}
		})
	}
}
