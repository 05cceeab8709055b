package fwd

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

// mergeRig is a forwarder without a kernel: two links of nq RX queues
// each, every queue's socket in memory (xsktest, rings of ringSize), two
// workers wired by
// setupOrdering as New wires them, and a fake clock they all read.
type mergeRig struct {
	t      *testing.T
	now    int64
	region *umem.Region
	f      *Forwarder
	w      [2]*worker
	socks  [2][]*xsktest.Socket
	labels map[uint64]string // frame address → packet name
}

const rigStart = int64(10 * time.Second) // the fake clock's start, ns

func newMergeRig(t *testing.T, nq int, ringSize uint32) *mergeRig {
	t.Helper()
	r, err := umem.New(umem.Config{FrameSize: 2048, Frames: 256, HugePages: umem.HugePagesOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	g := &mergeRig{t: t, now: rigStart, region: r, labels: map[uint64]string{}}
	f := &Forwarder{doms: []*domain{{region: r}}, flows: newFlowState([]*umem.Region{r}, xps.ModeSticky, 1024, true, 2),
		links: make([]linkInfo, 2), ports: make([][]*port, 2)}
	g.f = f
	for i := range f.ports {
		for q := range nq {
			s := xsktest.New(ringSize, 0, 0xFFFFFFF0)
			g.socks[i] = append(g.socks[i], s)
			p := &port{link: i, queue: q, sock: s.Socket}
			if q < 2 {
				p.tx = newLane(p)
			}
			f.ports[i] = append(f.ports[i], p)
		}
	}
	for q := range 2 {
		wk, err := newWaker()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { wk.close() })
		w := &worker{q: q, wake: wk, cpu: -1}
		w.rx.mem, w.rx.frameSize = r.Mem(), 2048
		w.umems = oneDomain(r, linearize.Policy{ChunkSize: 2048}, 64)
		w.flows.table = f.flows
		w.lanes = newTXLanes(2, 64)
		w.chg.live = AllLinks(2) // as newWorker: both links may be sent to
		for i := range f.ports {
			w.lanes.tx[i] = f.ports[i][q].tx
			for qq := q; qq < nq; qq += 2 {
				p := f.ports[i][qq]
				w.rx.add(p, w)
				if p.tx != nil {
					w.lanes.own = append(w.lanes.own, p.tx)
				}
			}
		}
		f.workers = append(f.workers, w)
		g.w[q] = w
	}
	setupOrdering(f, 128)
	for _, w := range g.w {
		w.flows.order.clock = func() int64 { return g.now }
	}
	return g
}

func (g *mergeRig) port(link, q int) *port { return g.f.ports[link][q] }

// stamps gives link 0's ports the program's newest stamp per queue, as a
// native-mode program keeps it, for the test to write.
func (g *mergeRig) stamps() *xsk.LastStamps {
	st := xsk.NewMemLastStamps(len(g.f.ports[0]))
	for _, p := range g.f.ports[0] {
		p.stamps = st
	}
	return st
}

// frame takes a frame for a packet named name, in the state a packet
// built from it for TX is in (KernelTX, as layOut leaves it).
func (g *mergeRig) frame(name string) uint64 {
	a, ok := g.w[0].umems.dom[0].frames.Alloc(umem.KernelTX)
	if !ok {
		g.t.Fatal("rig: out of frames")
	}
	g.labels[a] = name
	return a
}

// hand is what forward does with a packet of descs descriptors received on
// RX queue q of link i, stamped stamp, bound for TX queue tq: push and
// publish (waking tq's owner if it sleeps). It returns the frames.
func (g *mergeRig) hand(i, q, tq int, name string, stamp int64, descs int) []uint64 {
	g.t.Helper()
	p := g.port(i, q)
	var ds []xsk.Desc
	var addrs []uint64
	for k := range descs {
		n := name
		if k > 0 {
			n = fmt.Sprintf("%s+%d", name, k)
		}
		a := g.frame(n)
		addrs = append(addrs, a)
		opt := uint32(0)
		if k < descs-1 {
			opt = xsk.PktContd
		}
		ds = append(ds, xsk.Desc{Addr: a, Len: 60, Options: opt})
	}
	if !p.owner.flows.order.push(p, tq, 1-i, ds, stamp, g.now) {
		g.t.Fatalf("rig: handoff from link %d queue %d to %d full", i, q, tq)
	}
	p.owner.flows.order.publish(p)
	return addrs
}

// arrive puts a packet stamped stamp on RX ring q of link i, unread: what
// the owner's watermark then reports. It returns the packet's address.
func (g *mergeRig) arrive(i, q int, stamp int64) uint64 {
	a, _ := g.w[0].umems.dom[0].frames.Alloc(umem.KernelRX)
	addr := a + 256
	binary.NativeEndian.PutUint64(g.region.Mem()[addr-xsk.MetaStampOff:], uint64(stamp))
	s := g.socks[i][q]
	s.RX.Produce(xsk.Desc{Addr: addr, Len: 60})
	s.RX.Publish()
	return addr
}

// sent takes what the fake kernel finds on TX queue tq of link o since the
// last call, by packet name.
func (g *mergeRig) sent(o, tq int) []string {
	var out []string
	for _, d := range g.socks[o][tq].TX.Take(1 << 10) {
		n, ok := g.labels[d.Addr]
		if !ok {
			n = fmt.Sprintf("?%#x", d.Addr)
		}
		out = append(out, n)
	}
	return out
}

func (g *mergeRig) timeouts(o, tq int) uint64 { return g.port(o, tq).stats.load(cOrderTimeouts) }

func usec(n int) int64 { return int64(n) * int64(time.Microsecond) }

func sameNames(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

const slackNS = int64(watermarkSlack)

// publish is worker q's watermark pass at the current (fake) time, as its
// merge makes it every round.
func (g *mergeRig) publish(q int) {
	w := g.w[q]
	w.flows.now = g.now
	w.publishWatermarks()
}

// read is worker q reading RX ring q of link i: the unread packet leaves
// the ring (and goes through a handoff, by hand, if the test wants).
func (g *mergeRig) read(i, q int) {
	rx := &g.socks[i][q].Socket.RX
	n, _ := rx.Peek(64)
	rx.Release(n)
}

// merge runs worker q's merge at the current time.
func (g *mergeRig) merge(q int) (sent, held int) { return g.w[q].merge() }

// holdsToSlack is a TestMergeOrder case: worker 1 has handed off queue
// 1's packets up to 300 µs ago, and the program's newest for queue 1 reads
// newest(s), s being the stamp of packet x on queue 0. Queue 1 is not
// caught up, so x is held past exactSlack (why says what holds it) and
// sent once the full slack has passed.
func holdsToSlack(why string, newest func(s int64) int64) func(*testing.T, *mergeRig) {
	return func(t *testing.T, g *mergeRig) {
		st := g.stamps()
		g.now += usec(5000)
		s := g.now - usec(2)
		g.port(0, 1).seen.Store(s - usec(300))
		st.Store(1, newest(s))
		st.Store(0, s)
		g.hand(0, 0, 0, "x", s, 1)
		g.port(0, 0).seen.Store(s)
		g.publish(1)
		g.now = s + int64(exactSlack)
		if sent, held := g.merge(0); sent != 0 || held != 1 {
			t.Fatalf("past exactSlack with %s: sent %d, held %d; want 0, 1", why, sent, held)
		}
		g.now = s + slackNS
		g.publish(1)
		if sent, held := g.merge(0); sent != 1 || held != 0 {
			t.Fatalf("past the slack: sent %d, held %d; want 1, 0", sent, held)
		}
	}
}

// TestMergeOrder drives the merge of worker 0 (TX queue 0 of link 1) over
// packets handed from the RX rings of link 0 under a fake clock.
func TestMergeOrder(t *testing.T) {
	cases := []struct {
		name string
		nq   int // RX queues per link
		ring uint32
		run  func(t *testing.T, g *mergeRig)
	}{
		{"stamp order across three rings", 3, 64, func(t *testing.T, g *mergeRig) {
			base := g.now - usec(1000)
			g.hand(0, 0, 0, "a", base+10, 1)
			g.hand(0, 0, 0, "d", base+40, 1)
			g.hand(0, 1, 0, "b", base+20, 1)
			g.hand(0, 1, 0, "e", base+50, 2) // two descriptors, leaves whole
			g.hand(0, 2, 0, "c", base+30, 1)
			g.publish(1)
			if sent, held := g.merge(0); sent != 5 || held != 0 {
				t.Fatalf("merge: sent %d, held %d; want 5, 0", sent, held)
			}
			if got := g.sent(1, 0); !sameNames(got, []string{"a", "b", "c", "d", "e", "e+1"}) {
				t.Fatalf("sent %v, want stamp order a b c d e e+1", got)
			}
			if n := g.port(1, 0).stats.load(cTXPackets); n != 5 {
				t.Errorf("tx_packets %d, want 5", n)
			}
		}},
		{"waits for an older watermark, leaves once it advances", 2, 64, func(t *testing.T, g *mergeRig) {
			s := g.now - usec(500)
			g.arrive(0, 1, s-1) // worker 1 has not read an older packet yet
			g.publish(1)
			g.hand(0, 0, 0, "x", s, 1)
			if sent, held := g.merge(0); sent != 0 || held != 1 {
				t.Fatalf("with an older packet unread on another ring: sent %d, held %d; want 0, 1", sent, held)
			}
			if got := g.sent(1, 0); len(got) != 0 {
				t.Fatalf("sent %v before the older packet", got)
			}
			g.now += usec(10)
			g.read(0, 1)
			g.hand(0, 1, 0, "y", s-1, 1)
			g.publish(1)
			if sent, held := g.merge(0); sent != 2 || held != 0 {
				t.Fatalf("after worker 1 read it: sent %d, held %d; want 2, 0", sent, held)
			}
			if got := g.sent(1, 0); !sameNames(got, []string{"y", "x"}) {
				t.Fatalf("sent %v, want y x", got)
			}
			if n := g.timeouts(1, 0); n != 0 {
				t.Errorf("order_hold_timeouts %d, want 0", n)
			}
		}},
		{"a sleeping owner's empty ring counts as now - slack", 2, 64, func(t *testing.T, g *mergeRig) {
			g.publish(1) // then worker 1 goes quiet: its watermark stays
			g.now += usec(5000)
			s := g.now - usec(10)
			g.hand(0, 0, 0, "x", s, 1)
			if sent, held := g.merge(0); sent != 0 || held != 1 {
				t.Fatalf("owner awake, watermark stale: sent %d, held %d; want 0, 1", sent, held)
			}
			g.w[1].wake.idle.Store(true)
			if sent, held := g.merge(0); sent != 0 || held != 1 {
				t.Fatalf("owner asleep, slack not passed: sent %d, held %d; want 0, 1", sent, held)
			}
			if due := g.w[0].flows.holdDue; due != s+slackNS {
				t.Fatalf("holdDue %d, want the stamp plus the slack, %d", due-rigStart, s+slackNS-rigStart)
			}
			g.now = s + slackNS - 1
			if sent, _ := g.merge(0); sent != 0 {
				t.Fatal("sent before the slack passed")
			}
			g.now = s + slackNS
			if sent, held := g.merge(0); sent != 1 || held != 0 {
				t.Fatalf("at holdDue: sent %d, held %d; want 1, 0", sent, held)
			}
			if n := g.timeouts(1, 0); n != 0 {
				t.Errorf("order_hold_timeouts %d, want 0: nothing was sent early", n)
			}
			if g.w[0].flows.holdDue != 1<<63-1 {
				t.Errorf("holdDue %d with nothing held", g.w[0].flows.holdDue)
			}
		}},
		{"a ring whose owner handed off its queue's newest packet counts as now - exactSlack", 2, 64, func(t *testing.T, g *mergeRig) {
			st := g.stamps()
			g.publish(1) // worker 1 stays awake: its own watermark goes stale
			g.now += usec(5000)
			s := g.now - int64(exactSlack)/2
			st.Store(1, s-usec(300)) // worker 1 took and handed off queue 1's newest
			g.port(0, 1).seen.Store(s - usec(300))
			st.Store(0, s)
			g.hand(0, 0, 0, "x", s, 1)
			g.port(0, 0).seen.Store(s)
			if sent, held := g.merge(0); sent != 0 || held != 1 {
				t.Fatalf("within exactSlack: sent %d, held %d; want 0, 1", sent, held)
			}
			if due := g.w[0].flows.holdDue; due != s+int64(exactSlack) {
				t.Fatalf("holdDue %d, want the stamp plus exactSlack, %d", due-rigStart, s+int64(exactSlack)-rigStart)
			}
			g.now = s + int64(exactSlack)
			if sent, held := g.merge(0); sent != 1 || held != 0 {
				t.Fatalf("at stamp + exactSlack, owner awake: sent %d, held %d; want 1, 0", sent, held)
			}
			if n := g.timeouts(1, 0); n != 0 {
				t.Errorf("order_hold_timeouts %d, want 0", n)
			}
		}},
		{"a queue the program is stamping a packet of (StampBusy) is not caught up", 2, 64,
			holdsToSlack("queue 1 busy", func(int64) int64 { return xsk.StampBusy })}, // its clock read may be older than x
		{"a packet in flight on another queue (its newest stamp unseen) holds to the full slack", 2, 64,
			holdsToSlack("an older packet in flight", func(s int64) int64 { return s - usec(1) })}, // stamped, not yet in the ring
		{"a sleeping owner with an unread packet still holds", 2, 64, func(t *testing.T, g *mergeRig) {
			s := g.now - usec(100)
			g.arrive(0, 1, s-usec(1))
			g.publish(1)
			g.w[1].wake.idle.Store(true)
			g.hand(0, 0, 0, "x", s, 1)
			g.now += usec(1000)
			if sent, held := g.merge(0); sent != 0 || held != 1 {
				t.Fatalf("sent %d, held %d; want 0, 1", sent, held)
			}
		}},
		{"a blocked ring stops holding the others after blockedHold, counted", 2, 64, func(t *testing.T, g *mergeRig) {
			s := g.now - usec(300)
			g.arrive(0, 1, s-usec(100)) // worker 1 cannot read it: its handoff rings are full
			g.publish(1)
			g.port(0, 1).blockedAt.Store(g.now)
			g.hand(0, 0, 0, "w", s-usec(200), 1) // older than the blocked watermark
			g.hand(0, 0, 0, "x", s, 1)
			if sent, held := g.merge(0); sent != 1 || held != 1 {
				t.Fatalf("just blocked: sent %d, held %d; want 1, 1", sent, held)
			}
			g.now += int64(blockedHold)
			if sent, _ := g.merge(0); sent != 0 {
				t.Fatal("sent at blockedHold, want after it")
			}
			g.now++
			if sent, held := g.merge(0); sent != 1 || held != 0 {
				t.Fatalf("blocked past blockedHold: sent %d, held %d; want 1, 0", sent, held)
			}
			if got := g.sent(1, 0); !sameNames(got, []string{"w", "x"}) {
				t.Fatalf("sent %v, want w x", got)
			}
			if n := g.timeouts(1, 0); n != 1 {
				t.Errorf("order_hold_timeouts %d, want 1 (x, past the blocked watermark; w was in order)", n)
			}
		}},
		{"maxHold releases a packet held by a stale watermark, counted", 2, 64, func(t *testing.T, g *mergeRig) {
			s := g.now - usec(300)
			g.arrive(0, 1, s-usec(100))
			g.publish(1) // worker 1 busy elsewhere, never gets back to it
			t0 := g.now
			g.hand(0, 0, 0, "x", s, 1)
			g.now = t0 + int64(maxHold) - 1
			if sent, held := g.merge(0); sent != 0 || held != 1 {
				t.Fatalf("before maxHold: sent %d, held %d; want 0, 1", sent, held)
			}
			if due := g.w[0].flows.holdDue; due != min(s+slackNS, t0+int64(maxHold)) {
				t.Fatalf("holdDue %d, want %d", due-rigStart, min(s+slackNS, t0+int64(maxHold))-rigStart)
			}
			g.now = t0 + int64(maxHold)
			if sent, held := g.merge(0); sent != 1 || held != 0 {
				t.Fatalf("at maxHold: sent %d, held %d; want 1, 0", sent, held)
			}
			if n := g.timeouts(1, 0); n != 1 {
				t.Errorf("order_hold_timeouts %d, want 1", n)
			}
		}},
		{"draining sends everything, in stamp order, uncounted", 2, 64, func(t *testing.T, g *mergeRig) {
			s := g.now - usec(300)
			g.arrive(0, 1, s-usec(100))
			g.publish(1)
			g.hand(0, 0, 0, "b", s, 1)
			g.hand(0, 1, 0, "a", s-usec(150), 1)
			g.hand(0, 1, 0, "c", s+1, 3)
			g.w[0].flows.draining = true
			if sent, held := g.merge(0); sent != 3 || held != 0 {
				t.Fatalf("draining: sent %d, held %d; want 3, 0", sent, held)
			}
			if got := g.sent(1, 0); !sameNames(got, []string{"a", "b", "c", "c+1", "c+2"}) {
				t.Fatalf("sent %v", got)
			}
			if n := g.timeouts(1, 0); n != 0 {
				t.Errorf("order_hold_timeouts %d, want 0", n)
			}
		}},
		{"a packet past its turn behind a full TX ring is counted once", 2, 8, func(t *testing.T, g *mergeRig) {
			s := g.now - usec(300)
			g.arrive(0, 1, s-usec(100))
			g.publish(1)
			g.port(0, 1).blockedAt.Store(g.now - int64(blockedHold) - 1)
			var want []string
			for k := range 8 { // in order: older than the blocked watermark
				n := fmt.Sprint("a", k)
				g.hand(0, 0, 0, n, s-usec(200)+int64(k), 1)
				want = append(want, n)
			}
			g.hand(0, 0, 0, "x", s, 1)
			for round := range 3 {
				sent, held := g.merge(0)
				if want := map[bool]int{true: 8, false: 0}[round == 0]; sent != want || held != 1 {
					t.Fatalf("round %d, TX ring full: sent %d, held %d; want %d, 1", round, sent, held, want)
				}
			}
			if n := g.timeouts(1, 0); n != 0 {
				t.Errorf("order_hold_timeouts %d while x could not be sent, want 0", n)
			}
			if got := g.sent(1, 0); !sameNames(got, want) {
				t.Fatalf("sent %v, want %v", got, want)
			}
			if sent, held := g.merge(0); sent != 1 || held != 0 {
				t.Fatalf("TX ring drained: sent %d, held %d; want 1, 0", sent, held)
			}
			if n := g.timeouts(1, 0); n != 1 {
				t.Errorf("order_hold_timeouts %d, want 1", n)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newMergeRig(t, c.nq, c.ring)
			c.run(t, g)
			for _, z := range g.region.Zones() {
				if v := z.Violations(); v != 0 {
					t.Errorf("zone %s: %d ownership violations", z.Name(), v)
				}
			}
		})
	}
}

// TestDropHandoffs: what is left in the rings handed to a worker when the
// forwarder closes is released (frames back to free, flows' in-flight
// counts taken off) and counted per packet as dropped_at_stop on the TX
// lane it was bound for — including what was published after the worker
// last looked at the ring.
func TestDropHandoffs(t *testing.T) {
	for _, c := range []struct {
		name      string
		lookFirst bool // worker 0 merges (and holds) before the rest arrives
	}{
		{"never looked at", false},
		{"published after the last look", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newMergeRig(t, 2, 64)
			s := g.now - usec(300)
			g.arrive(0, 1, s-usec(100))
			g.arrive(1, 1, s-usec(100))
			g.publish(1) // stale watermarks on both links hold everything
			var frames []uint64
			frames = append(frames, g.hand(0, 0, 0, "a", s, 1)...)
			frames = append(frames, g.hand(1, 1, 0, "b", s, 3)...) // link 1 → link 0
			if c.lookFirst {
				if sent, held := g.merge(0); sent != 0 || held != 4 {
					t.Fatalf("merge: sent %d, held %d; want 0, 4", sent, held)
				}
			}
			frames = append(frames, g.hand(0, 0, 0, "c", s+1, 2)...)
			frames = append(frames, g.hand(0, 1, 0, "d", s+2, 1)...)
			g.hand(0, 1, 1, "e", s+3, 1) // bound for worker 1: not worker 0's to drop
			g.w[0].dropHandoffs()
			if n := g.port(1, 0).stats.load(cDrops + count(dropAtStop)); n != 3 {
				t.Errorf("link 1 queue 0 dropped_at_stop %d, want 3 (a, c, d)", n)
			}
			if n := g.port(0, 0).stats.load(cDrops + count(dropAtStop)); n != 1 {
				t.Errorf("link 0 queue 0 dropped_at_stop %d, want 1 (b)", n)
			}
			for o := range g.w[0].flows.order.in {
				for k, h := range g.w[0].flows.order.in[o] {
					if h.tail.Load() != h.head.Load() {
						t.Errorf("handoff %d into link %d: %d entries left", k, o, h.tail.Load()-h.head.Load())
					}
				}
			}
			for _, a := range frames {
				if st := g.region.Frames.StateOf(a); st != umem.Free {
					t.Errorf("frame of %s: %v after dropHandoffs, want free", g.labels[a], st)
				}
			}
			if v := g.region.Frames.Violations(); v != 0 {
				t.Errorf("%d ownership violations", v)
			}
			if got := g.sent(1, 0); len(got) != 0 {
				t.Errorf("sent %v", got)
			}
		})
	}
}

// ready gives worker q what forward needs beyond the merge (batch and
// per-packet scratch, the inline limit) and, with a Handler, the verdict
// path's scratch, as newWorker does.
func (g *mergeRig) ready(q int, h Handler) *worker {
	w := g.w[q]
	var inlineMax atomic.Int32
	w.rx.batch, w.layout.inlineMax = 64, &inlineMax
	w.rx.chain = make([]xsk.Desc, 0, linearize.MaxDescs)
	w.layout.out = make([]xsk.Desc, linearize.MaxDescs)
	if w.tap.point == nil {
		w.tap.point = capture.NewHub(2, []string{"a", "b"}).Point(q)
	}
	w.verdicts = newVerdicts(h, 64)
	return w
}

// TestForwardReadsOrderingClock: both batch paths, cross-connect and
// Handler, read the ordering's clock (the rig's fake one): a packet they
// hand off is queued at that time, and a ring they find blocked is
// blocked from that time. A path reading the real clock would queue at,
// and block from, a time the merge does not share.
func TestForwardReadsOrderingClock(t *testing.T) {
	toLink1 := HandlerFunc(func(ps []Packet) {
		for i := range ps {
			ps[i].Forward(1)
		}
	})
	for _, tc := range []struct {
		name    string
		handler Handler
	}{
		{"cross-connect", nil},
		{"handler", toLink1},
	} {
		t.Run(tc.name+"/queued", func(t *testing.T) {
			g := newMergeRig(t, 2, 64)
			g.now += usec(777) // far from the real clock
			w := g.ready(0, tc.handler)
			in := g.port(0, 0)
			g.arrive(0, 0, g.now-usec(5))
			if n := w.forward(in); n != 1 {
				t.Fatalf("forward: %d packets, want 1", n)
			}
			var queued []int64
			for _, h := range in.out[1] {
				h.sync()
				n, idx := h.peek(^uint32(0))
				for k := range n {
					queued = append(queued, h.at(idx+k).queued)
				}
			}
			if len(queued) != 1 || queued[0] != g.now {
				t.Fatalf("handed off at %v (ns since the rig's start), want [%d]: the fake clock", sinceStart(queued), g.now-rigStart)
			}
		})
		t.Run(tc.name+"/blocked", func(t *testing.T) {
			g := newMergeRig(t, 2, 64)
			g.now += usec(777)
			w := g.ready(0, tc.handler)
			in := g.port(0, 0)
			for in.out[1][0].room() >= linearize.MaxDescs {
				g.hand(0, 0, 0, "filler", 0, 1)
			}
			g.arrive(0, 0, g.now-usec(5))
			if n := w.forward(in); n != 0 {
				t.Fatalf("forward with a full handoff ring: %d packets, want 0", n)
			}
			if at := in.blockedAt.Load(); at != g.now {
				t.Fatalf("blocked at %d ns since the rig's start, want %d: the fake clock", at-rigStart, g.now-rigStart)
			}
		})
	}
}

func sinceStart(ts []int64) []int64 {
	out := make([]int64, len(ts))
	for i, v := range ts {
		out[i] = v - rigStart
	}
	return out
}
