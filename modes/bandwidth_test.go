package modes_test

import (
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// TestTokenBucketAdmits: what a bucket of a rate and a burst admits of
// frames offered at given times: the burst at once, then the rate, never
// more than the burst after a pause, nothing larger than the burst.
func TestTokenBucketAdmits(t *testing.T) {
	type offer struct {
		at    time.Duration // since the start
		size  int           // bytes per frame
		count int           // frames offered at once
	}
	const ms = time.Millisecond
	for _, c := range []struct {
		name        string
		rate, burst uint64 // bits/s, bits
		offers      []offer
		want        int // bytes admitted
		slack       int // bytes the rounding may leave out (never add)
	}{
		{"the burst at once: 65 of 1000-byte frames fit 64 KiB",
			8e6, 64 << 10 * 8, []offer{{0, 1000, 100}}, 65 * 1000, 0},
		{"then 1 ms at 1 MB/s refills one frame",
			8e6, 64 << 10 * 8, []offer{{0, 1000, 100}, {ms, 1000, 100}}, 66 * 1000, 0},
		{"a pause refills no more than the burst",
			8e6, 1518 * 8, []offer{{0, 1518, 1}, {10 * time.Second, 1518, 100}}, 2 * 1518, 0},
		{"twice the rate offered: half admitted",
			1e6, 1518 * 8, func() (o []offer) {
				for i := range 200 { // 1250 bytes every 5 ms: 2 Mbit/s for 1 s
					o = append(o, offer{time.Duration(i) * 5 * ms, 1250, 1})
				}
				return o
			}(), 100 * 1250, 0},
		{"a frame larger than the burst never fits",
			1e9, 1518 * 8, []offer{{0, 2000, 10}, {time.Second, 2000, 10}}, 0, 0},
		{"100 Gbit/s, 64-byte frames: a 1 MB burst within a frame's rounding",
			100e9, 8e6, []offer{{0, 64, 20000}}, 1e6, 1e6 / 100},
		{"1 kbit/s, the least: 125 bytes a second",
			1000, 1518 * 8, []offer{{0, 100, 100}, {8 * time.Second, 100, 100}}, 15*100 + 10*100, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := modes.NewTokenBucket(c.rate, c.burst)
			got := 0
			for _, o := range c.offers {
				for range o.count {
					if b.Admit(o.size, int64(o.at)) {
						got += o.size
					}
				}
			}
			if got > c.want || got < c.want-c.slack {
				t.Errorf("admitted %d bytes; want %d (up to %d fewer)", got, c.want, c.slack)
			}
		})
	}
}

// TestTokenBucketConcurrent: goroutines charging one bucket at once (as a
// link's workers do) never get more through than rate × elapsed + burst,
// and get the burst at least. Run with -race.
func TestTokenBucketConcurrent(t *testing.T) {
	const (
		rate    = 80e6     // bits/s: 10 MB/s
		burst   = 64 << 13 // bits: 64 KiB
		workers = 4
		frame   = 1000
		run     = 200 * time.Millisecond
	)
	b := modes.NewTokenBucket(rate, burst)
	start := time.Now()
	var admitted, offered atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				now := time.Since(start)
				if now > run {
					return
				}
				offered.Add(frame)
				if b.Admit(frame, int64(now)) {
					admitted.Add(frame)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := int64(rate/8*elapsed.Seconds()) + burst/8
	t.Logf("%d workers, %v: offered %d bytes, admitted %d, bound %d", workers, elapsed, offered.Load(), admitted.Load(), bound)
	if got := admitted.Load(); got > bound || got < burst/8/frame*frame {
		t.Errorf("admitted %d bytes in %v; want the burst (%d) at least and at most rate×elapsed+burst = %d", got, elapsed, burst/8, bound)
	}
}

// TestLimitsCheck: the bandwidth plugin's rule (rate and burst together)
// and the policer's bounds, with a message naming the direction.
func TestLimitsCheck(t *testing.T) {
	for _, c := range []struct {
		l  modes.Limits
		ok bool
	}{
		{modes.Limits{}, true},
		{modes.Limits{IngressRate: 8e6, IngressBurst: 1 << 20}, true},
		{modes.Limits{EgressRate: 1e9, EgressBurst: 1 << 20}, true},
		{modes.Limits{IngressRate: 8e6}, false},
		{modes.Limits{EgressBurst: 1 << 20}, false},
		{modes.Limits{IngressRate: 999, IngressBurst: 1 << 20}, false},
		{modes.Limits{IngressRate: 2e15, IngressBurst: 1 << 20}, false},
		{modes.Limits{EgressRate: 8e6, EgressBurst: 1000}, false},
		{modes.Limits{EgressRate: 8e6, EgressBurst: 1 << 40}, false},
		// What containerd passes for an unset burst: math.MaxUint32 bits.
		{modes.Limits{IngressRate: 8e6, IngressBurst: 1<<32 - 1}, true},
	} {
		if err := c.l.Check(); (err == nil) != c.ok {
			t.Errorf("Check(%+v) = %v; want ok %v", c.l, err, c.ok)
		}
	}
}

// TestLimitsCheckBurstBounds: a burst, in bits as the control protocol
// carries it, is a full frame .. the bandwidth plugin's bound (burst/8
// under 2^32-1 bytes); the refusal states both bounds.
func TestLimitsCheckBurstBounds(t *testing.T) {
	const bounds = "want 12144 (a full frame) .. 34359738359 bits"
	for _, tt := range []struct {
		burst uint64
		ok    bool
	}{
		{12144, true},
		{math.MaxUint32 * 8, false},
		{math.MaxUint32*8 - 1, true}, // the reference plugin takes it
		{12143, false},
		{1 << 61, false},
		{math.MaxUint64, false},
	} {
		for _, l := range []modes.Limits{{IngressRate: 8e6, IngressBurst: tt.burst}, {EgressRate: 8e6, EgressBurst: tt.burst}} {
			err := l.Check()
			switch {
			case tt.ok && err != nil:
				t.Errorf("Check(%+v) = %v; want ok", l, err)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), bounds)):
				t.Errorf("Check(%+v) = %v; want refused, %q", l, err, bounds)
			}
		}
	}
}

// TestSwitchPolicesPorts: a pod's link given limits has what it sends
// over its egress rate dropped for rx_rate_limited (DropFor), and what is
// forwarded to it over its ingress rate dropped for tx_rate_limited on
// its own link (DropOut); an unlimited link's frames all pass; the limits
// follow the link's name (added again at another index) and go with
// ReleaseLimits.
func TestSwitchPolicesPorts(t *testing.T) {
	sw := newTestSwitch(t, 1024)
	// 1 kbit/s: nothing refills while the test runs.
	lim := modes.Limits{IngressRate: 1000, IngressBurst: 3 * 1000 * 8, EgressRate: 1000, EgressBurst: 2 * 1000 * 8}
	if err := sw.LimitPort("s28pa", lim); err != nil {
		t.Fatal(err)
	}
	if err := sw.LimitPort("s28pa", modes.Limits{EgressRate: 1}); err == nil {
		t.Error("LimitPort with a rate and no burst: no error")
	}
	frame := func(dst, src net.HardwareAddr, from string) []byte {
		f := ipv4Frame(dst, src, 0, from)
		return append(f, make([]byte, 1000-len(f))...)
	}
	// The host's address learned on the uplink, B's pinned on 2.
	send := func(in int, f []byte, n int) (pkts []fwd.Packet) {
		pkts = make([]fwd.Packet, n)
		for i := range pkts {
			pkts[i] = fwd.Packet{Data: f, Len: len(f), Link: in}
		}
		sw.Handle(pkts)
		return pkts
	}
	send(0, frame(podB, hostMAC, "10.99.0.1"), 1)
	tally := func(pkts []fwd.Packet) (fwded, rx, tx int) {
		for i := range pkts {
			v, _ := pkts[i].Verdict()
			switch {
			case v == fwd.VerdictForward:
				fwded++
			case pkts[i].Cause() == fwd.CauseRateLimited && pkts[i].DroppedOut() < 0:
				rx++
			case pkts[i].Cause() == fwd.CauseRateLimited && pkts[i].DroppedOut() == 1:
				tx++
			default:
				t.Errorf("frame %d: verdict %d cause %d out %d", i, v, pkts[i].Cause(), pkts[i].DroppedOut())
			}
		}
		return
	}
	for _, c := range []struct {
		name        string
		in          int
		f           []byte
		fwd, rx, tx int
	}{
		{"A sends 5 to the host: 2 fit its egress burst", 1, frame(hostMAC, podA, "10.99.0.2"), 2, 3, 0},
		{"the host sends 5 to A: 3 fit its ingress burst", 0, frame(podA, hostMAC, "10.99.0.1"), 3, 0, 2},
		{"B (unlimited) sends 5 to the host", 2, frame(hostMAC, podB, "10.99.0.3"), 5, 0, 0},
		{"B sends 5 to A: A's ingress is spent", 2, frame(podA, podB, "10.99.0.3"), 0, 0, 5},
	} {
		fw, rx, tx := tally(send(c.in, c.f, 5))
		if fw != c.fwd || rx != c.rx || tx != c.tx {
			t.Errorf("%s: forwarded %d, rx_rate_limited %d, tx_rate_limited %d; want %d, %d, %d", c.name, fw, rx, tx, c.fwd, c.rx, c.tx)
		}
	}
	if got := sw.PortLimits()["s28pa"]; got != lim {
		t.Errorf("PortLimits: %+v; want %+v", got, lim)
	}
	// A's link goes and comes back at index 3: policed there, with a
	// full bucket; index 1 is not.
	sw.LinkRemoved(1)
	sw.LinkAddedAs(1, "s28other")
	sw.LinkRemoved(3)
	sw.LinkAddedAs(3, "s28pa")
	if fw, rx, _ := tally(send(1, frame(hostMAC, podA, "10.99.0.2"), 5)); fw != 5 || rx != 0 {
		t.Errorf("index 1 after s28pa left: forwarded %d, rx_rate_limited %d; want 5, 0", fw, rx)
	}
	if fw, rx, _ := tally(send(3, frame(hostMAC, podA, "10.99.0.2"), 5)); fw != 2 || rx != 3 {
		t.Errorf("s28pa back at index 3: forwarded %d, rx_rate_limited %d; want 2, 3", fw, rx)
	}
	sw.ReleaseLimits("s28pa")
	if fw, rx, _ := tally(send(3, frame(hostMAC, podA, "10.99.0.2"), 5)); fw != 5 || rx != 0 {
		t.Errorf("after ReleaseLimits: forwarded %d, rx_rate_limited %d; want 5, 0", fw, rx)
	}
	if len(sw.PortLimits()) != 0 {
		t.Errorf("PortLimits after ReleaseLimits: %v", sw.PortLimits())
	}
}

// TestSwitchPolicesFloods: a flood (broadcast, multicast, unknown
// unicast) is charged to the ingress of every limited link it goes to,
// the link it came in on excepted: a link over its rate is left out of
// the flood and named for a tx_rate_limited drop (FloodDropOut), while
// the unlimited links keep getting it; a flood every link refuses names
// them all; egress limits alone leave floods whole. Five 1000-byte frames
// a case, at 1 kbit/s: nothing refills meanwhile.
func TestSwitchPolicesFloods(t *testing.T) {
	const n, size = 5, 1000
	mcast := net.HardwareAddr{0x01, 0, 0x5e, 0, 0, 1}
	unknown := net.HardwareAddr{0x02, 0x28, 0, 0, 0, 0xee}
	srcs := []net.HardwareAddr{hostMAC, podA, podB, {0x02, 0x28, 0, 0, 0, 0xc}}
	for _, c := range []struct {
		name    string
		dst     net.HardwareAddr
		in      int
		ingress [4]int // frames each link's ingress burst holds, 0 for no limit
		egress  bool   // link 2 limited out of the pod alone
	}{
		{"broadcast", bcastMAC, 0, [4]int{1: 3}, false},
		{"multicast", mcast, 0, [4]int{1: 3}, false},
		{"unknown-unicast", unknown, 0, [4]int{1: 3}, false},
		{"two-limited", bcastMAC, 0, [4]int{1: 3, 3: 1}, false},
		{"every-link-refuses", bcastMAC, 0, [4]int{1: 3, 2: 1, 3: 2}, false},
		{"from-a-limited-link", bcastMAC, 1, [4]int{1: 1, 3: 2}, false},
		{"egress-limits-alone", bcastMAC, 0, [4]int{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sw := modes.NewSwitch(1, 64, time.Minute)
			for i := 1; i < 4; i++ {
				name := fmt.Sprintf("fl%d", i)
				var l modes.Limits
				if b := c.ingress[i]; b > 0 {
					l.IngressRate, l.IngressBurst = 1000, uint64(max(b*size, 1518)*8)
				}
				if i == 2 && c.egress {
					l.EgressRate, l.EgressBurst = 1000, 1<<30
				}
				if err := sw.LimitPort(name, l); err != nil {
					t.Fatal(err)
				}
				sw.LinkAddedAs(i, name)
			}
			f := ipv4Frame(c.dst, srcs[c.in], 0, "10.99.0.9")
			f = append(f, make([]byte, size-len(f))...)
			all := fwd.AllLinks(4)
			for k := range n {
				p := []fwd.Packet{{Data: f, Len: len(f), Link: c.in}}
				sw.Handle(p)
				var over fwd.LinkSet // the limited links past their burst
				for i, b := range c.ingress {
					if b > 0 && i != c.in && k >= b {
						over = over.Add(i)
					}
				}
				wantCause := fwd.CauseRateLimited
				if over == 0 {
					wantCause = 0
				}
				v, out := p[0].Verdict()
				if v != fwd.VerdictFlood || out != all&^over || p[0].FloodDropped() != over || p[0].Cause() != wantCause {
					t.Errorf("frame %d: verdict %d to links %04b, dropped on %04b (cause %d); want a flood to %04b, dropped on %04b (cause %d)",
						k, v, out, p[0].FloodDropped(), p[0].Cause(), all&^over, over, wantCause)
				}
			}
		})
	}
}

// TestSwitchPolicesFloodsConcurrent: workers flooding at once through
// one limited link's bucket get exactly its burst through it (nothing
// refills at 1 kbit/s), every other copy named dropped on it, while
// another link's limits come and go (the set of links with an ingress
// limit changing under the floods): every frame reaches or is dropped on
// each link, never both, never neither. Run with -race.
func TestSwitchPolicesFloodsConcurrent(t *testing.T) {
	const (
		workers, rounds, batch = 4, 200, 16
		size                   = 1000
		burst                  = 50 // frames
	)
	sw := modes.NewSwitch(1, 64, time.Minute)
	for i, name := range []string{"", "fc1", "fc2", "fc3"} {
		if name == "" {
			continue
		}
		if name == "fc1" {
			if err := sw.LimitPort(name, modes.Limits{IngressRate: 1000, IngressBurst: burst * size * 8}); err != nil {
				t.Fatal(err)
			}
		}
		sw.LinkAddedAs(i, name)
	}
	f := ipv4Frame(bcastMAC, hostMAC, 0, "10.99.0.9")
	f = append(f, make([]byte, size-len(f))...)
	stop := make(chan struct{})
	var toggler sync.WaitGroup
	toggler.Go(func() {
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			if k%2 == 0 {
				if err := sw.LimitPort("fc3", modes.Limits{IngressRate: 1000 + uint64(k), IngressBurst: 1518 * 8}); err != nil {
					t.Error(err)
					return
				}
			} else {
				sw.ReleaseLimits("fc3")
			}
		}
	})
	var through, refused, wrong atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			pkts := make([]fwd.Packet, batch)
			for range rounds {
				for i := range pkts {
					pkts[i] = fwd.Packet{Data: f, Len: len(f), Link: 0}
				}
				sw.Handle(pkts)
				for i := range pkts {
					_, out := pkts[i].Verdict()
					dropped := pkts[i].FloodDropped()
					for l := 1; l < 4; l++ {
						if out.Has(l) == dropped.Has(l) || l == 2 && !out.Has(l) {
							wrong.Add(1)
						}
					}
					if out.Has(1) {
						through.Add(1)
					} else {
						refused.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	toggler.Wait()
	t.Logf("fc1: %d frames through, %d refused", through.Load(), refused.Load())
	if wrong.Load() != 0 || through.Load() != burst || through.Load()+refused.Load() != workers*rounds*batch {
		t.Errorf("%d frames sent or dropped wrong; fc1 got %d and refused %d; want its burst, %d, and the rest of %d refused",
			wrong.Load(), through.Load(), refused.Load(), burst, workers*rounds*batch)
	}
}

// BenchmarkSwitchLimited is BenchmarkSwitchSecured's batch with links 1..3
// limited both ways at a rate no batch reaches the end of (every frame
// charged twice, once leaving its link and once entering the next, and
// admitted): the policer's cost over port security's.
func BenchmarkSwitchLimited(b *testing.B) {
	benchSecuredSwitch(b, modes.Limits{IngressRate: 1e15, IngressBurst: 1 << 34, EgressRate: 1e15, EgressBurst: 1 << 34})
}

// floodBatch is a switch whose links 1..3 are policed to l (none: zero),
// and a batch of 64 broadcast frames of size bytes, from every link in
// turn.
func floodBatch(tb testing.TB, l modes.Limits, size int) (*modes.Switch, []fwd.Packet, func()) {
	sw := modes.NewSwitch(1, 0, 0)
	for i := 1; i < 4; i++ {
		name := fmt.Sprintf("fb%d", i)
		if err := sw.LimitPort(name, l); err != nil {
			tb.Fatal(err)
		}
		sw.LinkAddedAs(i, name)
	}
	pkts := make([]fwd.Packet, 64)
	frames := make([][]byte, len(pkts))
	for i := range frames {
		frames[i] = make([]byte, size)
		copy(frames[i], bcastMAC)
		copy(frames[i][6:], []byte{0x02, 0, 0, 0, 1, byte(i % 4)})
	}
	fill := func() {
		for i := range pkts {
			pkts[i] = fwd.Packet{Data: frames[i], Len: size, Link: i % 4}
		}
	}
	return sw, pkts, fill
}

// TestSwitchFloodNoAlloc: a batch of floods allocates nothing, whether
// no link is policed, the limited links take every copy, or refuse every
// one.
func TestSwitchFloodNoAlloc(t *testing.T) {
	for _, c := range []struct {
		name string
		l    modes.Limits
		want fwd.LinkSet // what frame 0 (from link 0) is dropped on
	}{
		{"unpoliced", modes.Limits{}, 0},
		{"admitted", modes.Limits{IngressRate: 1e15, IngressBurst: 1 << 34}, 0},
		{"refused", modes.Limits{IngressRate: 1000, IngressBurst: 1518 * 8}, 0b1110},
	} {
		t.Run(c.name, func(t *testing.T) {
			sw, pkts, fill := floodBatch(t, c.l, 1000)
			if a := testing.AllocsPerRun(100, func() { fill(); sw.Handle(pkts) }); a != 0 {
				t.Errorf("%.1f allocations a batch, want 0", a)
			}
			if got := pkts[0].FloodDropped(); got != c.want {
				t.Errorf("frame 0 dropped on %04b, want %04b", got, c.want)
			}
		})
	}
}

// BenchmarkSwitchFlood: one batch of 64 broadcast frames per op, no link
// policed.
func BenchmarkSwitchFlood(b *testing.B) { benchFlood(b, modes.Limits{}) }

// BenchmarkSwitchFloodLimited is BenchmarkSwitchFlood with links 1..3
// limited in at a rate no batch reaches the end of: every frame charged
// to the two or three limited links it floods to, and admitted.
func BenchmarkSwitchFloodLimited(b *testing.B) {
	benchFlood(b, modes.Limits{IngressRate: 1e15, IngressBurst: 1 << 34})
}

func benchFlood(b *testing.B, l modes.Limits) {
	sw, pkts, fill := floodBatch(b, l, 64)
	b.ReportAllocs()
	for range b.N {
		fill()
		sw.Handle(pkts)
	}
	if v, out := pkts[0].Verdict(); v != fwd.VerdictFlood || out != fwd.AllLinks(4) {
		b.Fatalf("frame 0: verdict %d, links %04b; want flooded to every link", v, out)
	}
}
