package modes_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// TestSwitchVerdicts: the switch's decisions, frame by frame, without a
// kernel: learn, flood unknown and broadcast to every link, forward known
// unicast to one, filter what is for the segment it came from, keep VLANs
// apart.
func TestSwitchVerdicts(t *testing.T) {
	sw := modes.NewSwitch(4, 64, time.Minute)
	a := []byte{0x02, 0, 0, 0, 0, 0xa}
	b := []byte{0x02, 0, 0, 0, 0, 0xb}
	bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	frame := func(dst, src []byte, vlan int) []byte {
		f := append(append(append([]byte(nil), dst...), src...), 0x08, 0x00)
		if vlan > 0 {
			f = append(append(append([]byte(nil), dst...), src...), 0x81, 0x00, byte(vlan>>8), byte(vlan), 0x08, 0x00)
		}
		return append(f, make([]byte, 46)...)
	}
	all := fwd.AllLinks(4)
	for i, c := range []struct {
		data []byte
		in   int
		want fwd.Verdict
		out  fwd.LinkSet
	}{
		{frame(b, a, 0), 0, fwd.VerdictFlood, all},                              // b unknown: flood (a learned on 0)
		{frame(a, b, 0), 2, fwd.VerdictForward, 0},                              // a known on 0 (b learned on 2)
		{frame(b, a, 0), 0, fwd.VerdictForward, 2},                              // b known on 2
		{frame(bcast, a, 0), 0, fwd.VerdictFlood, all},                          // broadcast
		{frame(a, b, 0), 0, fwd.VerdictDrop, 0},                                 // b moves to 0, where a is: filtered
		{frame(b, a, 0), 0, fwd.VerdictDrop, 0},                                 // b on the link it came from: filtered
		{frame(b, a, 100), 1, fwd.VerdictFlood, all},                            // VLAN 100 knows nothing yet
		{frame([]byte{0x01, 0, 0x5e, 0, 0, 1}, a, 0), 3, fwd.VerdictFlood, all}, // multicast; a moves to 3
		{[]byte{1, 2, 3}, 0, fwd.VerdictDrop, 0},                                // runt
	} {
		pkts := []fwd.Packet{{Data: c.data, Len: len(c.data), Link: c.in}}
		sw.Handle(pkts)
		v, out := pkts[0].Verdict()
		if v != c.want || v != fwd.VerdictDrop && out != c.out {
			t.Errorf("frame %d from link %d: verdict %d, links %b; want %d, %b", i, c.in, v, out, c.want, c.out)
		}
	}
	if st := sw.Stats(); st.Moves != 2 {
		t.Errorf("moves %d, want 2 (b from link 2 to 0, a from 0 to 3)", st.Moves)
	}
}

// TestReflectAndSink: reflect swaps the MAC addresses and reflects; sink
// drops.
func TestReflectAndSink(t *testing.T) {
	f := []byte{1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0x08, 0}
	pkts := []fwd.Packet{{Data: f}}
	modes.Reflect.Handle(pkts)
	if v, _ := pkts[0].Verdict(); v != fwd.VerdictReflect || f[0] != 2 || f[6] != 1 {
		t.Errorf("reflect: verdict %d, frame %x", v, f)
	}
	modes.Sink.Handle(pkts)
	if v, _ := pkts[0].Verdict(); v != fwd.VerdictDrop {
		t.Errorf("sink: verdict %d", v)
	}
}

// BenchmarkSwitch: one batch of 64 known-unicast frames per op, no
// allocation.
func BenchmarkSwitch(b *testing.B) { benchSwitch(b, modes.NewSwitch(4, 0, 0)) }

// benchSwitch switches batches of 64 known-unicast frames among 8 hosts
// on 4 links, and reports the allocations.
func benchSwitch(b *testing.B, sw *modes.Switch) {
	pkts := make([]fwd.Packet, 64)
	frames := make([][]byte, 64)
	for i := range frames {
		frames[i] = make([]byte, 64)
		copy(frames[i], []byte{0x02, 0, 0, 0, 1, byte(i % 8)})
		copy(frames[i][6:], []byte{0x02, 0, 0, 0, 1, byte((i + 1) % 8)})
	}
	b.ReportAllocs()
	for range b.N {
		for i := range pkts {
			pkts[i] = fwd.Packet{Data: frames[i], Len: 64, Link: i % 4}
		}
		sw.Handle(pkts)
	}
}

// TestSwitchConcurrentWorkers: workers switching at once, each receiving
// frames only from its own hosts on its own link, in a flood of addresses
// that keeps the table evicting: a frame is forwarded only to the link its
// destination lives on (or flooded), and no address is counted as moved.
// Run with -race.
func TestSwitchConcurrentWorkers(t *testing.T) {
	const workers, hosts, rounds = 8, 4096, 80
	sw := modes.NewSwitch(workers, 1024, time.Hour)
	// Host h lives behind link h % workers.
	addr := func(h int) []byte { return []byte{0x02, 0x42, 0, 0, byte(h >> 8), byte(h)} }
	var wrong, forwarded atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			pkts := make([]fwd.Packet, 32)
			frames := make([][]byte, len(pkts))
			for i := range frames {
				frames[i] = make([]byte, 60)
			}
			dsts := make([]int, len(pkts))
			for r := range rounds {
				for b := 0; b < hosts/workers; b += len(pkts) {
					for i := range pkts {
						src := ((b+i)%(hosts/workers))*workers + w
						dsts[i] = (src*7 + r + i) % hosts
						copy(frames[i][0:6], addr(dsts[i]))
						copy(frames[i][6:12], addr(src))
						pkts[i] = fwd.Packet{Data: frames[i], Len: 60, Link: w}
					}
					sw.Handle(pkts)
					for i := range pkts {
						if v, out := pkts[i].Verdict(); v == fwd.VerdictForward {
							forwarded.Add(1)
							if out != fwd.LinkSet(dsts[i]%workers) { // Forward's LinkSet is the link
								wrong.Add(1)
							}
						}
					}
				}
			}
		})
	}
	wg.Wait()
	st := sw.Stats()
	t.Logf("%d forwarded, %+v", forwarded.Load(), st)
	if wrong.Load() != 0 || st.Moves != 0 || forwarded.Load() == 0 {
		t.Errorf("%d of %d frames forwarded to a link their destination is not on, %d moves; want 0, 0", wrong.Load(), forwarded.Load(), st.Moves)
	}
}
