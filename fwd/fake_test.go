package fwd_test

// Whole forwarders on the fake environment (package fwdtest): no root, no
// kernel, milliseconds each. Here the harness (startFake and its helpers)
// and the tests of the engine's frame: cross-connect, the modes, drop
// reasons, link events, set-up, wake-ups. A subject's fake tests sit in
// its file (VLAN, checksums, promiscuity, stamps and ordering, jumbo),
// beside its veth tests, which keep what only the kernel shows (its
// drivers, XDP, checksums offloaded by a real stack).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/umem"
)

// fakeRun is a forwarder running on a fake environment.
type fakeRun struct {
	t      *testing.T
	env    *fwdtest.Env
	links  []*fwdtest.Link
	f      *fwd.Forwarder
	cancel context.CancelFunc
	done   chan error
	closed bool
}

// startFake adds a link per option (named l0, l1, …), builds a forwarder
// between them with cfg on the fake environment and runs it. Cleanup
// stops it and checks that the UMEM came back whole.
func startFake(t *testing.T, cfg fwd.Config, links ...fwdtest.LinkOptions) *fakeRun {
	t.Helper()
	r := &fakeRun{t: t, env: fwdtest.New(), done: make(chan error, 1)}
	cfg.Links = nil
	for i, o := range links {
		r.links = append(r.links, r.env.AddLink(fmt.Sprintf("l%d", i), o))
		cfg.Links = append(cfg.Links, fmt.Sprintf("l%d", i))
	}
	cfg.Env = r.env
	if cfg.HugePages == 0 {
		cfg.HugePages = umem.HugePagesOff
	}
	if cfg.Queues > 1 && cfg.CPUs == nil {
		cfg.NoPin = true // the test's goroutines share the CPUs
	}
	f, err := fwd.New(cfg)
	if err != nil {
		t.Fatalf("fwd.New: %v", err)
	}
	r.f = f
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- f.Run(ctx) }()
	t.Cleanup(func() { r.close() })
	return r
}

// close stops the forwarder, closes it, and checks that every UMEM address
// came back: Leaked 0, every zone free.
func (r *fakeRun) close() error {
	t := r.t
	t.Helper()
	if r.closed {
		return nil
	}
	r.closed = true
	r.cancel()
	runErr := <-r.done
	// Transmit what the last drain sent, so that its completions come back.
	for _, l := range r.links {
		l.Collect()
	}
	if err := r.f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if n := r.f.Leaked(); n != 0 {
		t.Errorf("Leaked() = %d after Close, want 0", n)
	}
	for d, reg := range r.f.Regions() {
		for _, z := range reg.Zones() {
			if c := z.Counts(); c[umem.Free] != z.Len() {
				t.Errorf("domain %d zone %s after Close: %v (want all %d free)", d, z.Name(), c, z.Len())
			}
			if v := z.Violations(); v != 0 {
				t.Errorf("domain %d zone %s: %d ownership violations", d, z.Name(), v)
			}
		}
	}
	return runErr
}

// soon polls cond, finely, until it holds or 5 s pass.
func soon(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

var (
	macA  = net.HardwareAddr{2, 0, 0, 0, 0, 0xa}
	macB  = net.HardwareAddr{2, 0, 0, 0, 0, 0xb}
	macC  = net.HardwareAddr{2, 0, 0, 0, 0, 0xc}
	bcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	ip1   = netip.MustParseAddr("198.18.0.1")
	ip2   = netip.MustParseAddr("198.18.0.2")
)

// seqFrame is a UDP frame of size bytes from src to dst, source port
// sport, carrying seq in its payload (bytes 42..45) and a pattern after.
func seqFrame(dst, src net.HardwareAddr, sport uint16, seq uint32, size int) []byte {
	b := topo.UDPFrame(dst, src, ip1, ip2, sport, 9, size)
	binary.BigEndian.PutUint32(b[42:], seq)
	for i := 46; i < len(b); i++ {
		b[i] = byte(i*7 + int(seq))
	}
	return b
}

func seqOf(b []byte) uint32 { return binary.BigEndian.Uint32(b[42:]) }

// received waits until link l counted n packets received. With one queue
// a batch's TX descriptors are on their rings before its receive counts
// are published (both batch paths), so from then on Collect has every
// frame those packets made: a test asserting that something was not sent
// needs no sleep.
func (r *fakeRun) received(l int, n uint64) {
	r.t.Helper()
	soon(r.t, fmt.Sprintf("%d received on link %d", n, l), func() bool { return r.f.LinkStats(l).RXPackets == n })
}

// inject injects every frame on link l queue q, retrying (with a collect
// of the output links, so the forwarder has room) while the queue cannot
// take one.
func (r *fakeRun) inject(l, q int, frame []byte, o fwdtest.RX) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !r.links[l].Inject(q, frame, o) {
		if time.Now().After(deadline) {
			r.t.Fatalf("link %d queue %d took no frame for 5 s: %+v", l, q, r.links[l].Counters())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestFakeXConnect: frames of every TX path (inline copy, the frame
// itself) injected on one link leave the other, byte for byte and in
// order, both ways, counted once each.
func TestFakeXConnect(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       fwd.Config
		sizes     []int
		wantPaths []string
	}{
		{"inline", fwd.Config{}, []int{60, 128, 256}, []string{"inline"}},
		{"frame", fwd.Config{}, []int{257, 1000, 1514}, []string{"frame"}},
		{"inline-off", fwd.Config{InlineMax: fwd.InlineOff}, []int{60, 1514}, []string{"frame"}},
		{"need-wakeup", fwd.Config{Spin: -1}, []int{60, 1514}, []string{"inline", "frame"}},
		// Multi-buffer: up to MaxTxFrags (4) descriptors leave as the
		// chain, longer ones repacked into a frag block.
		{"jumbo-chain", fwd.Config{MaxTxFrags: 4}, []int{3000, 7000}, []string{"chain"}},
		{"jumbo-frag", fwd.Config{MaxTxFrags: 2}, []int{5500, 9014}, []string{"frag"}}, // fewer descriptors repacked
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opt fwdtest.LinkOptions
			if strings.HasPrefix(tc.name, "jumbo") {
				opt.MTU = 9000 // multi-buffer on (MultiBufferAuto)
			}
			r := startFake(t, tc.cfg, opt, opt)
			if tc.name == "need-wakeup" {
				for _, l := range r.links {
					l.SetNeedWakeup(true)
				}
			}
			const perSize = 100
			for dir := range 2 {
				in, out := dir, 1-dir
				var want [][]byte
				for i := range perSize * len(tc.sizes) {
					f := seqFrame(macB, macA, 1000, uint32(i), tc.sizes[i%len(tc.sizes)])
					want = append(want, f)
					r.inject(in, 0, f, fwdtest.RX{})
				}
				got := r.links[out].CollectN(len(want), 5*time.Second)
				if len(got) != len(want) {
					t.Fatalf("link %d → %d: %d frames out, want %d", in, out, len(got), len(want))
				}
				for i, g := range got {
					if !bytes.Equal(g.Data, want[i]) {
						t.Fatalf("link %d → %d: frame %d out differs from frame %d in (seq %d, %d bytes, want %d)", in, out, i, i, seqOf(g.Data), len(g.Data), len(want[i]))
					}
				}
			}
			if tc.name == "need-wakeup" {
				if c := r.links[1].Counters(); c.Kicks == 0 {
					t.Errorf("need_wakeup set: no TX kick on link 1: %+v", c)
				}
			}
			n := uint64(perSize * len(tc.sizes))
			soon(t, "counters", func() bool { return r.f.LinkStats(1).TXPackets == n && r.f.LinkStats(0).TXPackets == n })
			for i := range 2 {
				s := r.f.LinkStats(i)
				if s.RXPackets != n || s.TXPackets != n || s.TotalDrops() != 0 {
					t.Errorf("link %d: rx %d tx %d drops %v, want %d, %d and none", i, s.RXPackets, s.TXPackets, s.Drops, n, n)
				}
				var paths uint64
				for _, p := range tc.wantPaths {
					paths += s.TXPaths[p]
				}
				if paths != n {
					t.Errorf("link %d: paths %v, want all %d on %v", i, s.TXPaths, n, tc.wantPaths)
				}
			}
		})
	}
}

// TestFakeModes: every built-in mode, as a Handler, on whole forwarders:
// what leaves which link.
func TestFakeModes(t *testing.T) {
	t.Run("reflect", func(t *testing.T) {
		r := startFake(t, fwd.Config{Handler: modes.Reflect, Queues: 2}, fwdtest.LinkOptions{Queues: 2})
		for q := range 2 {
			for i := range 50 {
				r.inject(0, q, seqFrame(macB, macA, uint16(1000+q), uint32(i), 100+i*20), fwdtest.RX{})
			}
		}
		got := r.links[0].CollectN(100, 5*time.Second)
		if len(got) != 100 {
			t.Fatalf("%d frames reflected, want 100", len(got))
		}
		next := map[int]uint32{}
		for _, g := range got {
			q := int(binary.BigEndian.Uint16(g.Data[34:])) - 1000
			if g.Queue != q {
				t.Errorf("frame from RX queue %d reflected on TX queue %d", q, g.Queue)
			}
			if !bytes.Equal(g.Data[0:6], macA) || !bytes.Equal(g.Data[6:12], macB) {
				t.Errorf("reflected frame %x → %x: MACs not swapped", g.Data[6:12], g.Data[0:6])
			}
			if s := seqOf(g.Data); s != next[q] {
				t.Errorf("queue %d: seq %d out, want %d", q, s, next[q])
			}
			next[q]++
		}
	})
	t.Run("sink", func(t *testing.T) {
		r := startFake(t, fwd.Config{Handler: modes.Sink}, fwdtest.LinkOptions{})
		for i := range 100 {
			r.inject(0, 0, seqFrame(macB, macA, 1000, uint32(i), 200), fwdtest.RX{})
		}
		soon(t, "100 received", func() bool { return r.f.LinkStats(0).RXPackets == 100 })
		s := r.f.LinkStats(0)
		if s.Drops[fwd.DropHandler] != 100 || s.TXPackets != 0 {
			t.Errorf("sink: handler_drops %d tx %d, want 100 and 0", s.Drops[fwd.DropHandler], s.TXPackets)
		}
		if n := r.links[0].Promiscuous(); n != 0 {
			t.Errorf("sink: %d promiscuous memberships, want 0 (PromiscAuto: a sink needs none)", n)
		}
		if out := r.links[0].Collect(); len(out) != 0 {
			t.Errorf("sink transmitted %d frames", len(out))
		}
	})
	t.Run("switch", func(t *testing.T) {
		sw := modes.NewSwitch(3, 1024, time.Minute)
		r := startFake(t, fwd.Config{Handler: sw}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
		for i, l := range r.links {
			if n := l.Promiscuous(); n != 1 {
				t.Errorf("link %d: %d promiscuous memberships, want 1", i, n)
			}
		}
		rx := make([]uint64, 3)
		step := func(name string, in int, frame []byte, want ...int) {
			t.Helper()
			r.inject(in, 0, frame, fwdtest.RX{})
			rx[in]++
			r.received(in, rx[in])
			for i, l := range r.links {
				n := 0
				if slices.Contains(want, i) {
					n = 1
				}
				got := l.CollectN(n, time.Second)
				if len(got) != n || n == 1 && !bytes.Equal(got[0].Data, frame) {
					t.Fatalf("%s: link %d transmitted %d frames, want %d, identical", name, i, len(got), n)
				}
			}
		}
		step("broadcast from A on 0 floods", 0, seqFrame(bcast, macA, 1, 0, 64), 1, 2)
		step("B on 1 to A, learned on 0", 1, seqFrame(macA, macB, 1, 1, 64), 0)
		step("A to B, learned on 1", 0, seqFrame(macB, macA, 1, 2, 64), 1)
		step("A to unknown C floods", 0, seqFrame(macC, macA, 1, 3, 64), 1, 2)
		step("A to A on its own segment: filtered", 0, seqFrame(macA, macA, 1, 4, 64))
	})
}

// TestFakeDropReasons: each drop is counted under its reason, and a
// capture sees it with that reason.
func TestFakeDropReasons(t *testing.T) {
	short := seqFrame(macB, macA, 1, 0, 100)
	binary.BigEndian.PutUint16(short[16:], 200) // IPv4 total length past the frame's end
	for _, tc := range []struct {
		name    string
		handler fwd.Handler
		frame   []byte
		link    int // where the drop is counted
		reason  string
	}{
		{"truncated", nil, short, 0, fwd.DropRXTruncated},
		{"truncated-handler", modes.Reflect, short, 0, fwd.DropRXTruncated},
		{"handler", modes.Sink, seqFrame(macB, macA, 1, 0, 100), 0, fwd.DropHandler},
		{"no-verdict", fwd.HandlerFunc(func([]fwd.Packet) {}), seqFrame(macB, macA, 1, 0, 100), 0, fwd.DropHandler},
		{"len-changed", fwd.HandlerFunc(func(p []fwd.Packet) {
			for i := range p {
				p[i].Len--
				p[i].Forward(1)
			}
		}), seqFrame(macB, macA, 1, 0, 100), 0, fwd.DropHandler},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links := []fwdtest.LinkOptions{{}, {}}
			r := startFake(t, fwd.Config{Handler: tc.handler}, links...)
			sess, err := r.f.Capture().Open(capture.Spec{Dirs: capture.Drop})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close() // open: every batch from here on sees it
			const n = 10
			for range n {
				r.inject(0, 0, tc.frame, fwdtest.RX{})
			}
			soon(t, "drops counted", func() bool { return r.f.LinkStats(tc.link).Drops[tc.reason] == n })
			s := r.f.LinkStats(tc.link)
			if s.TotalDrops() != n {
				t.Errorf("drops %v, want %d of %s only", s.Drops, n, tc.reason)
			}
			var recs []capture.Record
			soon(t, "captured drops", func() bool {
				sess.Read(100, func(rec []byte) bool {
					c, _ := capture.Parse(rec)
					c.Data = bytes.Clone(c.Data)
					recs = append(recs, c)
					return true
				})
				return len(recs) >= n
			})
			for _, c := range recs {
				if c.Dir != capture.Drop || capture.ReasonNames()[c.Reason] != tc.reason || c.Link != 0 || !bytes.Equal(c.Data, tc.frame) {
					t.Errorf("captured %v %q on link %d (%d bytes), want drop %q on link 0, the frame as received", c.Dir, capture.ReasonNames()[c.Reason], c.Link, len(c.Data), tc.reason)
				}
			}
			if out := r.links[1].Collect(); len(out) != 0 {
				t.Errorf("%d dropped frames transmitted", len(out))
			}
		})
	}
}

// TestFakeTXFull: a Handler forwarding to a link that is down fills its TX
// ring, then drops what does not fit (tx_full) instead of stalling; the
// link back up, the frames on the ring leave.
func TestFakeTXFull(t *testing.T) {
	fwdTo1 := fwd.HandlerFunc(func(p []fwd.Packet) {
		for i := range p {
			p[i].Forward(1)
		}
	})
	r := startFake(t, fwd.Config{Handler: fwdTo1, RingSize: 64}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
	r.links[1].SetUp(false)
	soon(t, "link 1 down", func() bool { return r.f.LinkStats(1).LinkDowns == 1 })
	const n = 200
	for i := range n {
		r.inject(0, 0, seqFrame(macB, macA, 1, uint32(i), 100), fwdtest.RX{})
	}
	soon(t, "all received", func() bool { return r.f.LinkStats(0).RXPackets == n })
	s := r.f.LinkStats(1)
	full := s.Drops[fwd.DropTXFull]
	if full == 0 || s.TXPackets+full != n {
		t.Fatalf("link 1 down: tx %d + tx_full %d, want %d with some tx_full", s.TXPackets, full, n)
	}
	r.links[1].SetUp(true)
	got := r.links[1].CollectN(int(s.TXPackets), 5*time.Second)
	if uint64(len(got)) != s.TXPackets {
		t.Fatalf("link back up: %d frames out, want the %d queued", len(got), s.TXPackets)
	}
	for i, g := range got {
		if seqOf(g.Data) != uint32(i) {
			t.Fatalf("frame %d out is seq %d: the ring's frames leave first, in order", i, seqOf(g.Data))
		}
	}
}

// TestFakeLinkEvents: the link monitor on the fake's events: a link down
// and up is counted and forwarding resumes; a deleted link ends Run with
// ErrLinkGone; a queue count change with ErrQueuesChanged.
func TestFakeLinkEvents(t *testing.T) {
	t.Run("down-up", func(t *testing.T) {
		r := startFake(t, fwd.Config{}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
		r.links[1].SetUp(false)
		soon(t, "a link down counted", func() bool { return r.f.LinkStats(1).LinkDowns == 1 })
		r.links[1].SetUp(true)
		soon(t, "link 1 up", func() bool { return r.f.LinkStats(1).DownSeconds > 0 })
		f := seqFrame(macB, macA, 1, 0, 100)
		r.inject(0, 0, f, fwdtest.RX{})
		if got := r.links[1].CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, f) {
			t.Fatalf("after down and up: %d frames out, want the one sent", len(got))
		}
		if s := r.f.LinkStats(1); s.LinkDowns != 1 {
			t.Errorf("link_downs %d, want 1", s.LinkDowns)
		}
	})
	for _, tc := range []struct {
		name string
		do   func(l *fwdtest.Link)
		want error
	}{
		{"deleted", (*fwdtest.Link).Delete, fwd.ErrLinkGone},
		{"queues", func(l *fwdtest.Link) { l.SetQueues(2, 2) }, fwd.ErrQueuesChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startFake(t, fwd.Config{}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
			tc.do(r.links[1])
			select {
			case err := <-r.done:
				r.done <- err
				if !errors.Is(err, tc.want) {
					t.Fatalf("Run returned %v, want %v", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Run still running 5 s after the change")
			}
			if err := r.close(); !errors.Is(err, tc.want) {
				t.Errorf("Run: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestFakeSetup: what New does with the environment: programs attached and
// committed, every RX queue's socket registered (several queues per
// worker too), promiscuous membership held while running; Close releases
// all of it; a refused step leaves nothing behind.
func TestFakeSetup(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		r := startFake(t, fwd.Config{Queues: 2}, fwdtest.LinkOptions{Queues: 4}, fwdtest.LinkOptions{Queues: 4})
		for i, l := range r.links {
			p := l.Program()
			if !p.Committed() || p.Registered() != 4 || l.Promiscuous() != 1 || r.f.LinkQueues(i) != 4 {
				t.Errorf("link %d: committed %v, %d sockets registered, %d memberships, %d queues; want true, 4, 1, 4", i, p.Committed(), p.Registered(), l.Promiscuous(), r.f.LinkQueues(i))
			}
		}
		// Every RX queue is served: two per worker.
		for q := range 4 {
			r.inject(0, q, seqFrame(macB, macA, uint16(q), uint32(q), 100), fwdtest.RX{})
		}
		r.env.Advance(time.Millisecond) // past the merge's watermark slack
		if got := r.links[1].CollectN(4, 5*time.Second); len(got) != 4 {
			t.Fatalf("%d of 4 frames, one per RX queue, out", len(got))
		}
		r.close()
		for i, l := range r.links {
			if p := l.Program(); !p.Closed() || p.Registered() != 0 || l.Promiscuous() != 0 {
				t.Errorf("link %d after Close: program closed %v, %d registered, %d memberships", i, p.Closed(), p.Registered(), l.Promiscuous())
			}
		}
		if !r.links[0].Inject(0, seqFrame(macB, macA, 1, 0, 100), fwdtest.RX{}) && r.links[0].Counters().Passed == 0 {
			t.Errorf("after Close a frame is neither passed to the stack nor counted")
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(e *fwdtest.Env)
		cfg   fwd.Config
		opts  []fwdtest.LinkOptions
		input bool // an InputError
	}{
		{"no-capabilities", func(e *fwdtest.Env) { e.Caps = &fwd.InputError{Err: errors.New("missing capabilities: CAP_BPF")} }, fwd.Config{}, []fwdtest.LinkOptions{{}, {}}, true},
		{"foreign-program", nil, fwd.Config{}, []fwdtest.LinkOptions{{}, {Foreign: true}}, true},
		{"queues-beyond-link", nil, fwd.Config{Queues: 3}, []fwdtest.LinkOptions{{Queues: 2}, {Queues: 4}}, true},
		{"zerocopy-on", nil, fwd.Config{ZeroCopy: 1}, []fwdtest.LinkOptions{{}, {}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := fwdtest.New()
			if tc.setup != nil {
				tc.setup(env)
			}
			cfg := tc.cfg
			var links []*fwdtest.Link
			for i, o := range tc.opts {
				links = append(links, env.AddLink(fmt.Sprintf("l%d", i), o))
				cfg.Links = append(cfg.Links, fmt.Sprintf("l%d", i))
			}
			cfg.Env, cfg.HugePages = env, umem.HugePagesOff
			f, err := fwd.New(cfg)
			if err == nil {
				f.Close()
				t.Fatal("New succeeded")
			}
			if fwd.IsInputError(err) != tc.input {
				t.Errorf("New: %v: input error %v, want %v", err, fwd.IsInputError(err), tc.input)
			}
			for i, l := range links {
				if p := l.Program(); p != nil && (!p.Closed() || p.Committed()) || l.Promiscuous() != 0 {
					t.Errorf("link %d after a failed New: program %+v left, %d memberships", i, p, l.Promiscuous())
				}
			}
		})
	}
}

// TestFakeUnknownLink: a link the environment does not have is an input
// error wrapping ErrUnknownLink.
func TestFakeUnknownLink(t *testing.T) {
	env := fwdtest.New()
	env.AddLink("a", fwdtest.LinkOptions{})
	_, err := fwd.New(fwd.Config{Links: []string{"a", "nope"}, Env: env})
	if !errors.Is(err, fwd.ErrUnknownLink) || !fwd.IsInputError(err) {
		t.Fatalf("New: %v, want an input error wrapping ErrUnknownLink", err)
	}
}

// TestFakeWakesSleepingWorker: a socket in memory has no fd for poll(2);
// the fake wakes the worker that reads it (Env.Notify) when it publishes,
// so a frame injected while the worker sleeps is forwarded on the wake-up,
// an eventfd write each, not at the poll's timeout.
func TestFakeWakesSleepingWorker(t *testing.T) {
	r := startFake(t, fwd.Config{Spin: -1}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
	const n = 20
	for i := range n {
		soon(t, "the worker asleep", func() bool {
			w := r.f.WorkerStats()[0]
			return w.Sleeps > w.Polls // in ppoll(2)
		})
		before := r.f.WorkerStats()[0].EventfdWrites
		f := seqFrame(macB, macA, 1, uint32(i), 100)
		r.inject(0, 0, f, fwdtest.RX{})
		if got := r.links[1].CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, f) {
			t.Fatalf("frame %d: %d out, want it", i, len(got))
		}
		if w := r.f.WorkerStats()[0].EventfdWrites; w != before+1 {
			t.Fatalf("frame %d injected while the worker slept: %d eventfd writes, want 1", i, w-before)
		}
	}
}

// TestFakeStopWakesWorkers: Stop rouses every sleeping worker through its
// eventfd, so that Run returns at once instead of after each worker's
// poll timeout (a daemon's shutdown, a reload's rebuild).
func TestFakeStopWakesWorkers(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d-workers", workers), func(t *testing.T) {
			o := fwdtest.LinkOptions{Queues: workers}
			r := startFake(t, fwd.Config{Queues: workers}, o, o)
			// Idle: each worker sleeps in poll(2), its timeouts counted.
			soon(t, "every worker asleep", func() bool {
				for _, w := range r.f.WorkerStats() {
					if w.PollTimeouts == 0 {
						return false
					}
				}
				return true
			})
			before := r.f.WorkerStats()
			r.cancel()
			if err := <-r.done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			r.done <- nil // for close
			// Its last sleep ended by Stop's wake-up, not by its timeout
			// (or Stop came before it slept: then neither moved).
			for i, w := range r.f.WorkerStats() {
				if w.PollEventfd == before[i].PollEventfd && w.PollTimeouts > before[i].PollTimeouts {
					t.Errorf("worker %d: poll timeouts %d → %d, eventfd wake-ups %d → %d over Stop; want its sleep ended by the wake-up", i, before[i].PollTimeouts, w.PollTimeouts, before[i].PollEventfd, w.PollEventfd)
				}
			}
		})
	}
}
