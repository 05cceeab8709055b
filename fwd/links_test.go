package fwd_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/umem"
)

// Links added and removed while forwarding (links.go), on the fake
// environment.

// startSwitch runs a switch over two links, A behind l0 and B behind l1,
// able to hold max links, with A and B learned; one worker.
func startSwitch(t *testing.T, max int) (*fakeRun, *modes.Switch) {
	t.Helper()
	return startSwitchOn(t, max, 1)
}

// startSwitchOn is startSwitch with workers workers, each link of as many
// queues: packets then go through the ordering's handoff rings.
func startSwitchOn(t *testing.T, max, workers int) (*fakeRun, *modes.Switch) {
	t.Helper()
	sw := modes.NewSwitch(2, 1024, time.Minute)
	o := fwdtest.LinkOptions{Queues: workers}
	r := startFake(t, fwd.Config{Handler: sw, MaxLinks: max, Queues: workers}, o, o)
	if workers > 1 {
		runClock(t, r.env)
	}
	r.inject(0, 0, seqFrame(bcast, macA, 1, 0, 64), fwdtest.RX{})
	r.received(0, 1)
	r.links[1].CollectN(1, time.Second)
	r.inject(1, 0, seqFrame(macA, macB, 1, 0, 64), fwdtest.RX{})
	r.received(1, 1)
	r.links[0].CollectN(1, time.Second)
	return r, sw
}

// abTraffic sends n frames A→B (seq from first), over every RX queue in
// turn, and checks that l1 sent every one, in order, and nothing else.
func abTraffic(t *testing.T, r *fakeRun, first uint32, n int) {
	t.Helper()
	queues := r.f.Plan().Queues
	for i := range n {
		r.inject(0, i%queues, seqFrame(macB, macA, 2, first+uint32(i), 64+i%500), rxInOrder(r.env, i))
	}
	got := r.links[1].CollectN(n, 5*time.Second)
	if len(got) != n {
		t.Fatalf("A→B: %d of %d frames out of l1", len(got), n)
	}
	for i, g := range got {
		if s := seqOf(g.Data); s != first+uint32(i) {
			t.Fatalf("A→B: frame %d has seq %d, want %d", i, s, first+uint32(i))
		}
	}
}

// runClock has env's clock follow the real one until the test ends: the
// merge of several workers waits on the stamps' clock (held packets go at
// the watermark slack, or maxHold, past their stamp).
func runClock(t *testing.T, env *fwdtest.Env) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Microsecond):
			}
			now := time.Now()
			env.Advance(now.Sub(last))
			last = now
		}
	})
	// Registered after startFake's: runs first, but the forwarder's
	// drain does not wait on the clock (draining sends what is held).
	t.Cleanup(func() { close(done); wg.Wait() })
}

// rxInOrder stamps the i-th frame of a sequence after the one before:
// the fake clock moves in steps, and two frames of one stamp on two RX
// queues arrived at once, in no order the merge could know.
func rxInOrder(env *fwdtest.Env, i int) fwdtest.RX {
	return fwdtest.RX{Stamp: env.Now() + int64(i)}
}

// forWorkers runs test with one worker and with two (each link then of
// two queues: what crosses workers goes through the ordering's handoff
// rings, which an added link joins and a removed one leaves).
func forWorkers(t *testing.T, test func(t *testing.T, workers int)) {
	for _, w := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d-workers", w), func(t *testing.T) { test(t, w) })
	}
}

// linkSteps adds (+NAME) and removes (-NAME) links of f, in turn.
func linkSteps(t *testing.T, f *fwd.Forwarder, steps ...string) {
	t.Helper()
	for _, st := range steps {
		op, name := f.AddLink, st[1:]
		if st[0] == '-' {
			op = f.RemoveLink
		}
		if err := op(name); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
}

// injectOn injects frame on l queue 0, retrying while it cannot take it.
func injectOn(t *testing.T, l *fwdtest.Link, frame []byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !l.Inject(0, frame, fwdtest.RX{}) {
		if time.Now().After(deadline) {
			t.Fatalf("%s took no frame for 5 s", l.Name())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestFakeLinksAddRemove: sequences of adds and removes on a running
// switch; after each step traffic between l0 and l1 loses nothing, a
// broadcast floods to every link there is (an added one too) and to no
// removed one, a removed link's index is a hole the next add takes, and a
// removed link's addresses are forgotten.
func TestFakeLinksAddRemove(t *testing.T) { forWorkers(t, testFakeLinksAddRemove) }

func testFakeLinksAddRemove(t *testing.T, workers int) {
	for _, tc := range []struct {
		name  string
		steps []string // +NAME adds, -NAME removes
		want  []string // Links() after
	}{
		{"add", []string{"+c"}, []string{"l0", "l1", "c"}},
		{"add-remove", []string{"+c", "-c"}, []string{"l0", "l1", ""}},
		{"add-two-remove-first", []string{"+c", "+d", "-c"}, []string{"l0", "l1", "", "d"}},
		{"hole-reused", []string{"+c", "+d", "-c", "+e"}, []string{"l0", "l1", "e", "d"}},
		{"remove-start-link", []string{"+c", "-l1", "+l1"}, []string{"l0", "l1", "c"}},
		{"readd-same", []string{"+c", "-c", "+c", "-c", "+c"}, []string{"l0", "l1", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, sw := startSwitchOn(t, 8, workers)
			extra := map[string]*fwdtest.Link{}
			seq := uint32(100)
			for _, st := range tc.steps {
				name := st[1:]
				if st[0] == '+' {
					if r.env.LinkNamed(name) == nil {
						extra[name] = r.env.AddLink(name, fwdtest.LinkOptions{Queues: workers})
					}
					if err := r.f.AddLink(name); err != nil {
						t.Fatalf("AddLink(%s): %v", name, err)
					}
				} else {
					if err := r.f.RemoveLink(name); err != nil {
						t.Fatalf("RemoveLink(%s): %v", name, err)
					}
				}
				if slices.Contains(r.f.Links(), "l1") {
					abTraffic(t, r, seq, 50)
					seq += 50
				}
			}
			if got := r.f.Links(); !slices.Equal(got, tc.want) {
				t.Fatalf("Links() = %q, want %q", got, tc.want)
			}
			// A broadcast from A floods to every link there is (what
			// unknown unicast flooded before is collected first).
			for _, name := range tc.want {
				if name != "" {
					r.env.LinkNamed(name).Collect()
				}
			}
			b := seqFrame(bcast, macA, 3, 7, 80)
			r.inject(0, 0, b, fwdtest.RX{})
			for _, name := range tc.want[1:] {
				l := r.env.LinkNamed(name)
				if name == "" {
					continue
				}
				// With two workers, copies of A→B frames flooded
				// while B was unknown may still be on their way
				// (held for order): they may come first, the
				// broadcast once.
				var got []fwdtest.Frame
				deadline := time.Now().Add(5 * time.Second)
				for !slices.ContainsFunc(got, func(f fwdtest.Frame) bool { return bytes.Equal(f.Data, b) }) && time.Now().Before(deadline) {
					got = append(got, l.CollectN(1, time.Until(deadline))...)
				}
				got = append(got, l.Collect()...)
				n := 0
				for _, f := range got {
					switch {
					case bytes.Equal(f.Data, b):
						n++
					case !bytes.Equal(f.Data[:6], macB):
						t.Errorf("broadcast: %s sent a frame to %s, neither the broadcast nor a flooded A→B one", name, net.HardwareAddr(f.Data[:6]))
					}
				}
				if n != 1 {
					t.Errorf("broadcast: %s sent it %d times, want once (%d frames in all)", name, n, len(got))
				}
			}
			// A removed link is flooded to no more.
			for name, l := range extra {
				if !slices.Contains(tc.want, name) {
					if got := l.Collect(); len(got) != 0 {
						t.Errorf("removed link %s sent %d frames", name, len(got))
					}
				}
			}
			for e := range sw.All() {
				if tc.want[e.Link] == "" {
					t.Errorf("FDB entry %s on link %d, which was removed", e.MAC, e.Link)
				}
			}
		})
	}
}

// TestFakeLinkForwardsBothWays: an added link learns and is forwarded to
// and from, byte for byte; its counters are its own, and its totals stay
// in the summary once it is removed.
func TestFakeLinkForwardsBothWays(t *testing.T) { forWorkers(t, testFakeLinkForwardsBothWays) }

func testFakeLinkForwardsBothWays(t *testing.T, workers int) {
	r, _ := startSwitchOn(t, 4, workers)
	c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: workers})
	if err := r.f.AddLink("c"); err != nil {
		t.Fatalf("AddLink: %v", err)
	}
	fc := seqFrame(macA, macC, 4, 1, 300)
	injectOn(t, c, fc)
	if got := r.links[0].CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, fc) {
		t.Fatalf("C→A: %d frames out of l0, want the one sent", len(got))
	}
	fa := seqFrame(macC, macA, 4, 2, 200)
	r.inject(0, 0, fa, fwdtest.RX{})
	if got := c.CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, fa) {
		t.Fatalf("A→C: %d frames out of c, want the one sent", len(got))
	}
	if got := r.links[1].Collect(); len(got) != 0 {
		t.Errorf("A→C, C known: l1 sent %d frames, want none", len(got))
	}
	st := r.f.LinkStats(2)
	if st.RXPackets != 1 || st.TXPackets != 1 {
		t.Errorf("c: rx %d tx %d, want 1 and 1", st.RXPackets, st.TXPackets)
	}
	if err := r.f.RemoveLink("c"); err != nil {
		t.Fatalf("RemoveLink: %v", err)
	}
	// C's address is forgotten: a frame for it floods (to l1 only now).
	r.inject(0, 0, fa, fwdtest.RX{})
	if got := r.links[1].CollectN(1, 5*time.Second); len(got) != 1 {
		t.Errorf("A→C after C's removal: l1 sent %d frames, want the flood", len(got))
	}
	s := r.f.Summary()
	if got := s.Links["c"]; got.RXPackets != 1 || got.TXPackets != 1 {
		t.Errorf("summary of removed c: rx %d tx %d, want 1 and 1", got.RXPackets, got.TXPackets)
	}
}

// TestFakeLinkCycles: 50 add/remove cycles, with traffic into and out of
// the added link each time (frames left on its rings too), lose no UMEM
// address: startFake's cleanup checks Leaked() == 0 and every zone free.
func TestFakeLinkCycles(t *testing.T) { forWorkers(t, testFakeLinkCycles) }

func testFakeLinkCycles(t *testing.T, workers int) {
	r, _ := startSwitchOn(t, 3, workers)
	c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: workers})
	for i := range 50 {
		if err := r.f.AddLink("c"); err != nil {
			t.Fatalf("cycle %d: AddLink: %v", i, err)
		}
		injectOn(t, c, seqFrame(macA, macC, 5, uint32(i), 100))
		r.inject(0, 0, seqFrame(macC, macA, 5, uint32(i), 1400), fwdtest.RX{})
		// Half the cycles leave what c sent on its TX ring, and a frame
		// on its RX ring.
		if i%2 == 0 {
			c.CollectN(1, 5*time.Second)
			r.links[0].CollectN(1, 5*time.Second)
		} else {
			injectOn(t, c, seqFrame(bcast, macC, 5, uint32(i), 100))
		}
		if err := r.f.RemoveLink("c"); err != nil {
			t.Fatalf("cycle %d: RemoveLink: %v", i, err)
		}
		r.links[0].Collect()
		r.links[1].Collect()
	}
	abTraffic(t, r, 1000, 100)
	if err := r.close(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestFakeLinkRemoveUnderLoad: while frames flow A→B without pause, and
// stats are read, two links are added and removed 20 times; B receives
// every frame, in order.
func TestFakeLinkRemoveUnderLoad(t *testing.T) { forWorkers(t, testFakeLinkRemoveUnderLoad) }

func testFakeLinkRemoveUnderLoad(t *testing.T, workers int) {
	r, _ := startSwitchOn(t, 4, workers)
	for _, n := range []string{"c", "d"} {
		r.env.AddLink(n, fwdtest.LinkOptions{Queues: workers})
	}
	var sent atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var stuck atomic.Bool // l0 took no frame for 10 s
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			deadline := time.Now().Add(10 * time.Second)
			for !r.links[0].Inject(i%workers, seqFrame(macB, macA, 6, uint32(i), 64+i%200), rxInOrder(r.env, i)) {
				if stop.Load() && i > 0 || time.Now().After(deadline) {
					stuck.Store(!stop.Load())
					return
				}
				time.Sleep(20 * time.Microsecond)
			}
			sent.Add(1)
		}
	})
	var got [][]byte
	var collecting sync.WaitGroup
	collect := func(until func() bool) {
		deadline := time.Now().Add(30 * time.Second)
		for !until() && time.Now().Before(deadline) {
			for _, f := range r.links[1].Collect() {
				got = append(got, f.Data)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	collecting.Go(func() { collect(stop.Load) })
	// Stats readers (a metrics scrape, the stats line) run throughout.
	collecting.Go(func() {
		for !stop.Load() {
			for i := range r.f.Links() {
				r.f.LinkStats(i)
				r.f.QueueStats(i, 0)
				r.f.XDPPassed(i)
			}
			r.f.Summary()
			r.f.XPS()
			r.f.Capture().Links()
		}
	})
	const cycles = 20
	for range cycles {
		linkSteps(t, r.f, "+c", "+d", "-d", "-c")
	}
	stop.Store(true)
	wg.Wait()
	collecting.Wait()
	if stuck.Load() {
		t.Fatalf("l0 took no frame for 10 s after %d: %+v; l0 %+v", sent.Load(), r.links[0].Counters(), r.f.LinkStats(0))
	}
	total := int(sent.Load())
	collect(func() bool { return len(got) >= total })
	if len(got) != total {
		t.Fatalf("B received %d of %d frames during %d add/remove cycles; l0 drops %v", len(got), total, cycles, r.f.LinkStats(0).Drops)
	}
	// Every frame once; in order, but for the frames the merge of
	// several workers sent before their turn, each counted
	// (order_hold_timeouts: a worker starved of CPU past the hold bound).
	seen := make([]bool, total)
	late := 0
	for i, g := range got {
		s := seqOf(g)
		if int(s) >= total || seen[s] {
			t.Fatalf("frame %d has seq %d: not one of the %d sent, or twice", i, s, total)
		}
		seen[s] = true
		if i > 0 && s < seqOf(got[i-1]) {
			late++
		}
	}
	timeouts := r.f.LinkStats(1).OrderHoldTimeouts
	if late > 0 && uint64(late) > timeouts {
		t.Fatalf("%d frames out of order, %d sent past their turn counted (order_hold_timeouts)", late, timeouts)
	}
	t.Logf("%d frames during %d add/remove cycles of two links, none lost; %d out of order, %d order_hold_timeouts", total, cycles, late, timeouts)
}

// TestFakeLinkDeleted: a link the kernel deletes is removed, and the
// forwarder goes on: Run does not end, the others forward.
func TestFakeLinkDeleted(t *testing.T) { forWorkers(t, testFakeLinkDeleted) }

func testFakeLinkDeleted(t *testing.T, workers int) {
	r, _ := startSwitchOn(t, 4, workers)
	c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: workers})
	if err := r.f.AddLink("c"); err != nil {
		t.Fatalf("AddLink: %v", err)
	}
	injectOn(t, c, seqFrame(bcast, macC, 7, 0, 100))
	soon(t, "c's broadcast on l0", func() bool { return len(r.links[0].Collect()) > 0 })
	r.links[1].CollectN(1, 5*time.Second)
	c.Delete()
	soon(t, "c removed", func() bool { return !slices.Contains(r.f.Links(), "c") })
	r.links[1].SetUp(false) // a start link's deletion stays what it was: tested in TestFakeLinkEvents
	r.links[1].SetUp(true)
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v after an added link was deleted", err)
	default:
	}
	abTraffic(t, r, 10, 50)
	// Deleted and made again (a new container): added again.
	r.env.AddLink("c2", fwdtest.LinkOptions{Queues: workers})
	if err := r.f.AddLink("c2"); err != nil {
		t.Fatalf("AddLink after a deletion: %v", err)
	}
	if got := r.f.Links(); !slices.Equal(got, []string{"l0", "l1", "c2"}) {
		t.Errorf("Links() = %q", got)
	}
}

// TestFakeLinkRemoveFirst: the first link, whose socket registered the
// UMEM, is removed and added back like any other.
func TestFakeLinkRemoveFirst(t *testing.T) { forWorkers(t, testFakeLinkRemoveFirst) }

func testFakeLinkRemoveFirst(t *testing.T, workers int) {
	r, _ := startSwitchOn(t, 4, workers)
	c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: workers})
	if err := r.f.AddLink("c"); err != nil {
		t.Fatalf("AddLink(c): %v", err)
	}
	if err := r.f.RemoveLink("l0"); err != nil {
		t.Fatalf("RemoveLink(l0): %v", err)
	}
	// c's sockets were bound sharing l0's: C still reaches B.
	fc := seqFrame(macB, macC, 8, 1, 300)
	injectOn(t, c, fc)
	if got := r.links[1].CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, fc) {
		t.Fatalf("C→B without l0: %d frames out of l1, want the one sent", len(got))
	}
	// l0 back, at its index, bound sharing the UMEM with another socket.
	if err := r.f.AddLink("l0"); err != nil {
		t.Fatalf("AddLink(l0) again: %v", err)
	}
	if got := r.f.Links(); !slices.Equal(got, []string{"l0", "l1", "c"}) {
		t.Fatalf("Links() = %q", got)
	}
	r.inject(1, 0, seqFrame(macA, macB, 8, 2, 64), fwdtest.RX{}) // B again, so the switch floods to l0 or knows
	r.links[0].CollectN(1, 5*time.Second)
	r.inject(0, 0, seqFrame(bcast, macA, 8, 3, 64), fwdtest.RX{}) // A learned behind the new l0
	r.links[1].CollectN(1, 5*time.Second)
	c.CollectN(1, 5*time.Second)
	abTraffic(t, r, 0, 50)
}

// TestFakeLinkEveryOneLeaves: every link may leave, the first (the
// uplink, whose socket registered the UMEM) and the last included, by
// RemoveLink or by the kernel deleting it, and the forwarder runs on with
// none, saying so (LiveLinks 0), until links are added again: their
// sockets register the UMEM anew (after the uplink's removal,
// the next pod's deletion ended the daemon, or left it refusing every add
// with "the forwarder has no sockets").
func TestFakeLinkEveryOneLeaves(t *testing.T) { forWorkers(t, testFakeLinkEveryOneLeaves) }

func testFakeLinkEveryOneLeaves(t *testing.T, workers int) {
	r, _ := startSwitchOn(t, 4, workers)
	c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: workers})
	if err := r.f.AddLink("c"); err != nil {
		t.Fatalf("AddLink(c): %v", err)
	}
	if err := r.f.RemoveLink("l0"); err != nil {
		t.Fatalf("RemoveLink(l0), the uplink: %v", err)
	}
	r.links[1].Delete() // the kernel deletes a link given at start
	soon(t, "l1 removed", func() bool { return !slices.Contains(r.f.Links(), "l1") })
	c.Delete() // and the last one
	soon(t, "c removed", func() bool { return r.f.LiveLinks() == 0 })
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v when its last link left", err)
	default:
	}
	// Links again, their sockets registering the UMEM anew.
	d := r.env.AddLink("d", fwdtest.LinkOptions{Queues: workers})
	e := r.env.AddLink("e", fwdtest.LinkOptions{Queues: workers})
	for _, n := range []string{"d", "e"} {
		if err := r.f.AddLink(n); err != nil {
			t.Fatalf("AddLink(%s) with no link left: %v", n, err)
		}
	}
	if got := r.f.LiveLinks(); got != 2 {
		t.Fatalf("LiveLinks() = %d after two adds, want 2", got)
	}
	fd := seqFrame(bcast, macC, 9, 1, 200)
	injectOn(t, d, fd)
	if got := e.CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, fd) {
		t.Fatalf("d→e after every link left: %d frames out of e, want the one sent", len(got))
	}
	fe := seqFrame(macC, macB, 9, 2, 1000)
	injectOn(t, e, fe)
	if got := d.CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, fe) {
		t.Fatalf("e→d: %d frames out of d, want the one sent", len(got))
	}
}

// TestFakeLinkQueuesChange: in a mode that takes links while running, a
// link whose queue count changes (ethtool -L) is taken out and added back
// on its new queues; the forwarder and its other links run on (the
// forwarder was rebuilt, and a rebuild that found the uplink gone ended
// the daemon). A link whose new queues are fewer than the workers stays
// out, and the rest run on.
func TestFakeLinkQueuesChange(t *testing.T) {
	r, _ := startSwitchOn(t, 4, 1)
	c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: 1})
	if err := r.f.AddLink("c"); err != nil {
		t.Fatalf("AddLink(c): %v", err)
	}
	r.links[0].SetQueues(4, 4)
	soon(t, "l0 on 4 queues", func() bool { return slices.Contains(r.f.Links(), "l0") && r.f.LinkQueues(0) == 4 })
	c.SetQueues(2, 2)
	soon(t, "c on 2 queues", func() bool { return slices.Contains(r.f.Links(), "c") && r.f.LinkQueues(2) == 2 })
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v after a queue count change", err)
	default:
	}
	r.inject(1, 0, seqFrame(bcast, macB, 8, 2, 64), fwdtest.RX{}) // B again: the switch forgot l0's A
	r.links[0].CollectN(1, 5*time.Second)
	c.CollectN(1, 5*time.Second)
	r.inject(0, 3, seqFrame(bcast, macA, 8, 3, 64), fwdtest.RX{}) // A, on a queue l0 did not have
	r.links[1].CollectN(1, 5*time.Second)
	c.CollectN(1, 5*time.Second)
	abTraffic(t, r, 0, 50)
}

// TestFakeLinkErrors: what AddLink and RemoveLink refuse, and with which
// error.
func TestFakeLinkErrors(t *testing.T) {
	t.Run("xconnect", func(t *testing.T) {
		r := startFake(t, fwd.Config{}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
		r.env.AddLink("c", fwdtest.LinkOptions{})
		for _, err := range []error{r.f.AddLink("c"), r.f.RemoveLink("l1")} {
			if !errors.Is(err, linkop.ErrUnsupported) || !fwd.IsInputError(err) {
				t.Errorf("xconnect: %v, want an input error wrapping linkop.ErrUnsupported", err)
			}
		}
		if got := r.f.Links(); !slices.Equal(got, []string{"l0", "l1"}) {
			t.Errorf("Links() = %q after refusals", got)
		}
	})
	t.Run("switch", func(t *testing.T) {
		r, _ := startSwitch(t, 3)
		r.env.AddLink("c", fwdtest.LinkOptions{})
		r.env.AddLink("d", fwdtest.LinkOptions{})
		r.env.AddLink("big", fwdtest.LinkOptions{MTU: 9000})
		for _, tc := range []struct {
			name  string
			do    func() error
			want  error
			input bool
		}{
			{"add existing", func() error { return r.f.AddLink("l1") }, linkop.ErrExists, false},
			{"add missing", func() error { return r.f.AddLink("nope") }, linkop.ErrNoSuchLink, true},
			{"add missing (fwd)", func() error { return r.f.AddLink("nope") }, fwd.ErrUnknownLink, true},
			{"remove unknown", func() error { return r.f.RemoveLink("nope") }, linkop.ErrUnknownLink, false},
			{"add beyond max", func() error {
				if err := r.f.AddLink("c"); err != nil {
					return err
				}
				return r.f.AddLink("d")
			}, nil, true},
			{"mtu", func() error { r.f.RemoveLink("c"); return r.f.AddLink("big") }, nil, true},
		} {
			err := tc.do()
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || tc.input != fwd.IsInputError(err) {
				t.Errorf("%s: %v, want an error wrapping %v (input error: %v)", tc.name, err, tc.want, tc.input)
			}
		}
		if got := r.f.Links(); !slices.Equal(got, []string{"l0", "l1", ""}) {
			t.Errorf("Links() = %q after the refusals", got)
		}
		abTraffic(t, r, 0, 20)
	})
	t.Run("fewer-queues-than-workers", func(t *testing.T) {
		// Each worker sends on a TX queue of its own on every link.
		r := startFake(t, fwd.Config{Handler: modes.Reflect, Queues: 2, MaxLinks: 3}, fwdtest.LinkOptions{Queues: 2})
		r.env.AddLink("c", fwdtest.LinkOptions{Queues: 1})
		if err := r.f.AddLink("c"); err == nil || !fwd.IsInputError(err) {
			t.Errorf("a link of 1 queue to 2 workers: %v, want an input error", err)
		}
		r.env.AddLink("d", fwdtest.LinkOptions{Queues: 2})
		if err := r.f.AddLink("d"); err != nil {
			t.Errorf("a link of 2 queues to 2 workers: %v", err)
		}
		if got := r.f.Links(); !slices.Equal(got, []string{"l0", "d"}) {
			t.Errorf("Links() = %q, want l0 and d", got)
		}
	})
	for _, tc := range []struct {
		max   int
		links int
		h     fwd.Handler
	}{{65, 2, modes.Sink}, {1, 2, modes.Sink}, {-1, 2, modes.Sink}, {3, 2, nil}} {
		t.Run(fmt.Sprint("config-", tc.max), func(t *testing.T) {
			cfg := fwd.Config{Links: []string{"a", "b"}[:tc.links], Handler: tc.h, MaxLinks: tc.max}
			if err := cfg.Check(); !fwd.IsInputError(err) {
				t.Errorf("MaxLinks %d: Check() = %v, want an input error", tc.max, err)
			}
		})
	}
}

// TestFakeReconfigureLinks: a reload whose link list changed adds and
// removes the difference while forwarding (the removed first, so an added
// link may take a removed one's index) and reports it as applied, not as
// needing a restart; in xconnect it still needs a restart.
func TestFakeReconfigureLinks(t *testing.T) {
	r, sw := startSwitch(t, 4)
	r.env.AddLink("c", fwdtest.LinkOptions{})
	r.env.AddLink("d", fwdtest.LinkOptions{})
	cfg := func(links ...string) fwd.Config {
		return fwd.Config{Links: links, Handler: sw, MaxLinks: 4, Queues: 1, Env: r.env, HugePages: r.f.Plan().HugePages}
	}
	for _, tc := range []struct {
		links []string
		want  []string // Links() after
	}{
		{[]string{"l0", "l1", "c"}, []string{"l0", "l1", "c"}},
		{[]string{"l0", "c", "d"}, []string{"l0", "d", "c"}},
		{[]string{"l0", "d", "c"}, []string{"l0", "d", "c"}}, // the same set: nothing to do
		{[]string{"l0", "l1"}, []string{"l0", "l1", ""}},
	} {
		before := r.f.Links()
		rc, err := r.f.Reconfigure(cfg(tc.links...))
		if err != nil || rc.Failed != nil || len(rc.Restart) != 0 {
			t.Fatalf("Reconfigure(%q): %v, failed %v, restart %v", tc.links, err, rc.Failed, rc.Restart)
		}
		if got := r.f.Links(); !slices.Equal(got, tc.want) {
			t.Errorf("Reconfigure(%q): Links() = %q, want %q", tc.links, got, tc.want)
		}
		changed := slices.ContainsFunc(rc.Applied, func(c fwd.Change) bool { return c.Field == "Links" })
		if changed == slices.Equal(before, tc.want) {
			t.Errorf("Reconfigure(%q): applied %v (links %q before)", tc.links, rc.Applied, before)
		}
	}
	abTraffic(t, r, 0, 20)

	x := startFake(t, fwd.Config{}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
	x.env.AddLink("c", fwdtest.LinkOptions{})
	rc, err := x.f.Reconfigure(fwd.Config{Links: []string{"l0", "c"}, Env: x.env, HugePages: x.f.Plan().HugePages})
	if err != nil || !slices.ContainsFunc(rc.Restart, func(c fwd.Change) bool { return c.Field == "Links" }) {
		t.Errorf("xconnect Reconfigure with another link: %v, restart %v; want Links needing a restart", err, rc.Restart)
	}
}

// TestMaxLinksMemory: a switch of 2 links able to take 64 maps within
// 10 % of the UMEM of one started with 64: each link to come
// gets what it would have in a switch started with 64 (that ring size, its
// frames, its lanes' frag blocks), and the 2 links' rings grow above that
// only while the UMEM stays within a sixteenth of it (givenRingSize). A ring size
// set by hand is every link's; MaxLinks 0 leaves the sizing of before
// alone (2048-entry rings, 32 frag blocks a lane).
func TestMaxLinksMemory(t *testing.T) {
	size := func(links, max int, ring uint32) (int, fwd.Plan) {
		t.Helper()
		env := fwdtest.New()
		var names []string
		for i := range links {
			// Veths, as a switch's pods are: they bind in copy mode, as
			// every link added while running does, so the links given
			// and those to come get burst rings alike.
			names = append(names, fmt.Sprint("l", i))
			env.AddLink(names[i], fwdtest.LinkOptions{Veth: true})
		}
		f, err := fwd.New(fwd.Config{Links: names, Handler: modes.NewSwitch(links, 1024, 0), MaxLinks: max, RingSize: ring, Queues: 1, Env: env, HugePages: umem.HugePagesOff})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return f.Region().Size(), f.Plan()
	}
	two, p2 := size(2, 0, 0)
	_, p1 := size(1, 64, 0)
	reserved, pr := size(2, 64, 0)
	full, pf := size(64, 0, 0)
	if pr.AddedRingSize != pf.RingSize || pr.RingSize < pr.AddedRingSize || pr.RingSize > p2.RingSize {
		t.Errorf("2 links of 64: ring %d, added links' %d; want %d (64 links') for those added, %d..%d for the 2", pr.RingSize, pr.AddedRingSize, pf.RingSize, pf.RingSize, p2.RingSize)
	}
	if reserved < full || reserved*10 > full*11 {
		t.Errorf("2 links of 64: UMEM %d KiB, 64 at start %d KiB: %+.1f %%, want 0..10 %%", reserved>>10, full>>10, 100*float64(reserved-full)/float64(full))
	}
	if p2.MaxLinks != 2 || p2.RingSize != 2048 || p2.AddedRingSize != 2048 || p2.UMEM.FragBlocks != 2*32 || p2.UMEM.Frames != 2*3*2048 {
		t.Errorf("MaxLinks 0: plan MaxLinks %d ring %d added %d, %d frag blocks, %d frames; want 2, 2048, 2048, 64 and %d (as before)",
			p2.MaxLinks, p2.RingSize, p2.AddedRingSize, p2.UMEM.FragBlocks, p2.UMEM.Frames, 2*3*2048)
	}
	if _, ph := size(2, 64, 1024); ph.RingSize != 1024 || ph.AddedRingSize != pf.RingSize {
		t.Errorf("--ring-size 1024, 2 links of 64: ring %d, added %d; want 1024 for the 2 given, %d (64 links') for those added", ph.RingSize, ph.AddedRingSize, pf.RingSize)
	}
	t.Logf("an uplink alone of 64: ring %d", p1.RingSize)
	t.Logf("UMEM: 2 links %d MiB (ring %d); 2 of 64 %d MiB (ring %d, added %d); 64 at start %d MiB (ring %d): %+.1f %%, %d KiB per link to come",
		two>>20, p2.RingSize, reserved>>20, pr.RingSize, pr.AddedRingSize, full>>20, pf.RingSize,
		100*float64(reserved-full)/float64(full), (reserved-two)/62>>10)
}

// TestUMEMPlanBounded: the memory a forwarder pins is proportional to
// what it serves. A ring size set by hand is the links given's:
// the MaxLinks-1 links that may come keep the rings MaxLinks links would
// have, so a sink of one link at --ring-size 4096 pins tens of MiB (it
// pinned 1.7 GB: 63 links to come × 3 × 4096 frames of 2 KiB). A plan
// above Config.MaxUMEM is refused, naming the flags that lower it.
func TestUMEMPlanBounded(t *testing.T) {
	plan := func(mode string, ring uint32, maxUMEM int64) (fwd.Plan, error) {
		t.Helper()
		env := fwdtest.New()
		cfg := fwd.Config{RingSize: ring, Queues: 1, Env: env, HugePages: umem.HugePagesOff, MaxUMEM: maxUMEM}
		switch mode {
		case "sink":
			cfg.Links, cfg.Handler, cfg.MaxLinks = []string{"a"}, modes.NewSink(nil), 64
		case "switch":
			cfg.Links, cfg.Handler, cfg.MaxLinks = []string{"a", "b"}, modes.NewSwitch(64, 1024, 0), 64
		case "xconnect":
			cfg.Links = []string{"a", "b"}
		}
		for _, l := range cfg.Links {
			env.AddLink(l, fwdtest.LinkOptions{Veth: true})
		}
		f, err := fwd.New(cfg)
		if err != nil {
			return fwd.Plan{}, err
		}
		defer f.Close()
		if got := f.Region().Size(); got != f.Plan().UMEM.Size() {
			t.Errorf("%s ring %d: region %d bytes, plan %d", mode, ring, got, f.Plan().UMEM.Size())
		}
		return f.Plan(), nil
	}
	for _, mode := range []string{"sink", "switch", "xconnect"} {
		var line []string
		for _, ring := range []uint32{0, 256, 1024, 4096} {
			p, err := plan(mode, ring, 0)
			if err != nil {
				t.Fatalf("%s ring %d: %v", mode, ring, err)
			}
			mib := p.UMEM.Size() >> 20
			line = append(line, fmt.Sprintf("ring %d: %d MiB (%d reserved, added rings %d)", ring, mib, p.UMEMReserved>>20, p.AddedRingSize))
			// Per link given at 4096: a fill ring of 2×4096 and a TX
			// ring's worth of 2 KiB frames, 24 MiB, plus frag blocks
			// and inline slots; per link to come ~0.6 MiB.
			if want := 64 + 40*len(p.Links)*int(max(ring, 2048))/4096; mib > want {
				t.Errorf("%s, ring %d: UMEM %d MiB, want at most %d", mode, ring, mib, want)
			}
			if mode != "xconnect" && p.AddedRingSize > 64 {
				t.Errorf("%s, ring %d: links added get %d-entry rings, want those of 64 links (64)", mode, ring, p.AddedRingSize)
			}
		}
		t.Logf("%s: %s", mode, strings.Join(line, "; "))
	}
	_, err := plan("switch", 4096, 32<<20)
	var ie *fwd.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "--max-umem 32 MiB") || !strings.Contains(err.Error(), "--max-links 64") {
		t.Errorf("switch at --ring-size 4096 with --max-umem 32 MiB: %v; want an InputError naming --max-umem and --max-links", err)
	}
}

// TestFakeReconfigureAfterRemoval: a reload with the queues auto while a
// removed link has left a hole in the link table ("queues 0:
// want 1..1", the hole's 0 queues taken for a link's), and DefaultQueues
// read while links come and go (a data race on the link table; run with
// -race).
func TestFakeReconfigureAfterRemoval(t *testing.T) {
	r, sw := startSwitch(t, 4)
	r.env.AddLink("c", fwdtest.LinkOptions{})
	r.env.AddLink("d", fwdtest.LinkOptions{})
	if err := r.f.AddLink("c"); err != nil {
		t.Fatal(err)
	}
	if err := r.f.RemoveLink("l1"); err != nil {
		t.Fatal(err)
	}
	rc, err := r.f.Reconfigure(fwd.Config{Links: []string{"l0", "c"}, Handler: sw, MaxLinks: 4, Env: r.env, HugePages: r.f.Plan().HugePages})
	if err != nil || rc.Failed != nil {
		t.Fatalf("Reconfigure with --queues auto after a removal: %v, failed %v", err, rc.Failed)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for range 50 {
			if err := r.f.AddLink("d"); err != nil {
				t.Errorf("AddLink(d): %v", err)
				return
			}
			if err := r.f.RemoveLink("d"); err != nil {
				t.Errorf("RemoveLink(d): %v", err)
				return
			}
		}
	})
	for reads := 0; ; reads++ {
		select {
		case <-done:
			wg.Wait()
			t.Logf("%d DefaultQueues reads during 50 add/remove cycles", reads)
			return
		default:
		}
		if q := r.f.DefaultQueues(); q != 1 {
			t.Fatalf("DefaultQueues() = %d while links change, want 1", q)
		}
	}
}

// TestFakeRemovedLinksBounded: the totals of links removed while running
// are kept by name for the last 64 only, the older summed into one
// (item 10: they were kept per name until exit, ~1.7 KB per pod
// ever attached, and listed one by one in the stop log and the summary),
// and every packet is still counted once.
func TestFakeRemovedLinksBounded(t *testing.T) {
	r, _ := startSwitch(t, 4)
	const pods = 200
	for i := range pods {
		name := fmt.Sprintf("pod%d", i)
		c := r.env.AddLink(name, fwdtest.LinkOptions{})
		if err := r.f.AddLink(name); err != nil {
			t.Fatal(err)
		}
		injectOn(t, c, seqFrame(bcast, macC, 7, uint32(i), 100))
		soon(t, name+"'s broadcast received", func() bool {
			idx := slices.Index(r.f.Links(), name)
			return r.f.LinkStats(idx).RXPackets == 1
		})
		if err := r.f.RemoveLink(name); err != nil {
			t.Fatal(err)
		}
		c.Delete()
	}
	s := r.f.Summary()
	named, rx := 0, uint64(0)
	for name, ls := range s.Links {
		if strings.HasPrefix(name, "pod") {
			named++
			rx += ls.RXPackets
		}
	}
	if s.RemovedOlder == nil || named != 64 || s.RemovedOlder.Links != pods-64 {
		t.Fatalf("summary after %d pods: %d named, older %+v; want 64 named and %d older", pods, named, s.RemovedOlder, pods-64)
	}
	if rx+s.RemovedOlder.Totals.RXPackets != pods {
		t.Errorf("pods' rx packets: %d named + %d older, want %d", rx, s.RemovedOlder.Totals.RXPackets, pods)
	}
	if got := len(r.f.RemovedLinks()); got != 64 {
		t.Errorf("RemovedLinks: %d names, want 64", got)
	}
}

// TestFakeLinkRenamed: a link renamed while forwarded (ip link set name)
// is the same link, its sockets bound to its ifindex: it is forwarded on
// under its new name, stays so when the monitor watches the links anew
// (it was taken for deleted then and removed, the first link included),
// and is removed by that name.
func TestFakeLinkRenamed(t *testing.T) {
	r, _ := startSwitchOn(t, 4, 1)
	r.links[0].Rename("uplink")
	soon(t, "l0 known as uplink", func() bool { return r.f.Links()[0] == "uplink" })
	c := r.env.AddLink("c", fwdtest.LinkOptions{})
	if err := r.f.AddLink("c"); err != nil { // the monitor watches again
		t.Fatal(err)
	}
	r.links[1].Rename("l1new")
	soon(t, "l1 known as l1new", func() bool { return r.f.Links()[1] == "l1new" })
	r.links[1].SetQueues(1, 1) // the watch asks the new name's queues
	if got := r.f.Links(); !slices.Equal(got, []string{"uplink", "l1new", "c"}) {
		t.Fatalf("Links() = %q after the renames", got)
	}
	abTraffic(t, r, 0, 50)
	if err := r.f.RemoveLink("l1new"); err != nil {
		t.Fatalf("RemoveLink by the new name: %v", err)
	}
	c.Delete()
	soon(t, "c removed", func() bool { return !slices.Contains(r.f.Links(), "c") })
	if got := r.f.Links(); got[0] != "uplink" {
		t.Fatalf("Links() = %q: the renamed uplink was taken for deleted", got)
	}
}
