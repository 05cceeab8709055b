package modes_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// s28 frames: Ethernet (optionally 802.1Q) carrying ARP, IPv4 or IPv6
// from a given sender address.

var (
	podA     = net.HardwareAddr{0x02, 0x28, 0, 0, 0, 0xa}
	podB     = net.HardwareAddr{0x02, 0x28, 0, 0, 0, 0xb}
	hostMAC  = net.HardwareAddr{0x02, 0x28, 0, 0, 0, 0x1}
	bcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

func ethFrame(dst, src net.HardwareAddr, vlan int, etype uint16, payload []byte) []byte {
	f := append(append([]byte(nil), dst...), src...)
	if vlan > 0 {
		f = append(f, 0x81, 0x00, byte(vlan>>8), byte(vlan))
	}
	f = binary.BigEndian.AppendUint16(f, etype)
	f = append(f, payload...)
	for len(f) < 60 {
		f = append(f, 0)
	}
	return f
}

func arpFrame(dst, src, sha net.HardwareAddr, spa string) []byte {
	p := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	p = append(p, sha...)
	p = append(p, netip.MustParseAddr(spa).AsSlice()...)
	p = append(p, make([]byte, 6)...)
	p = append(p, 10, 99, 0, 1)
	return ethFrame(dst, src, 0, 0x0806, p)
}

// ipv4Frame is a UDP datagram (port 9 to 9, no payload) from IPv4
// address from.
func ipv4Frame(dst, src net.HardwareAddr, vlan int, from string) []byte {
	h := make([]byte, 20+8)
	h[0], h[9] = 0x45, 17
	h[3] = byte(len(h))
	copy(h[12:], netip.MustParseAddr(from).AsSlice())
	copy(h[16:], []byte{10, 99, 0, 1})
	h[21], h[23], h[25] = 9, 9, 8
	return ethFrame(dst, src, vlan, 0x0800, h)
}

// ipv6Frame is a UDP datagram (port 9 to 9, no payload) from IPv6
// address from.
func ipv6Frame(dst, src net.HardwareAddr, from string) []byte {
	h := make([]byte, 40+8)
	h[0], h[5], h[6] = 0x60, 8, 17
	copy(h[8:], netip.MustParseAddr(from).AsSlice())
	copy(h[24:], netip.MustParseAddr("2001:db8::1").AsSlice())
	h[41], h[43], h[45] = 9, 9, 8
	return ethFrame(dst, src, 0, 0x86dd, h)
}

// naFrame is a neighbour advertisement from IPv6 address from for target.
func naFrame(dst, src net.HardwareAddr, from, target string) []byte {
	h := make([]byte, 40+24)
	h[0], h[5], h[6], h[7] = 0x60, 24, 58, 255
	copy(h[8:], netip.MustParseAddr(from).AsSlice())
	copy(h[24:], netip.MustParseAddr("ff02::1").AsSlice())
	h[40] = 136
	copy(h[48:], netip.MustParseAddr(target).AsSlice())
	return ethFrame(dst, src, 0, 0x86dd, h)
}

// newTestSwitch is a switch of four links: 0 the uplink, 1 pod A and 2 pod B
// (secured, added by name as the daemon adds a pod's link), 3 an
// unsecured link.
func newTestSwitch(t testing.TB, size int) *modes.Switch {
	t.Helper()
	sw := modes.NewSwitch(1, size, time.Minute)
	for i, c := range []struct {
		name string
		port *modes.Port
	}{
		{"s28pa", &modes.Port{MAC: podA, IPs: []netip.Addr{netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("2001:db8::2")}}},
		{"s28pb", &modes.Port{MAC: podB, IPs: []netip.Addr{netip.MustParseAddr("10.99.0.3")}}},
		{"s28l3", nil},
	} {
		if c.port != nil {
			if err := sw.SecurePort(c.name, *c.port); err != nil {
				t.Fatalf("SecurePort %s: %v", c.name, err)
			}
		}
		sw.LinkAddedAs(i+1, c.name)
	}
	return sw
}

// TestPortSecurityVerdicts: frame by frame, what a secured port lets
// through and what it drops, and for which reason; and that its address
// stays where it is pinned whatever other links send.
func TestPortSecurityVerdicts(t *testing.T) {
	sw := newTestSwitch(t, 1024)
	all := fwd.AllLinks(4)
	for _, c := range []struct {
		name  string
		data  []byte
		in    int
		want  fwd.Verdict
		out   fwd.LinkSet
		cause fwd.DropCause
	}{
		{"B broadcasts as A", ethFrame(bcastMAC, podA, 0, 0x0800, nil), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedSource},
		{"then A's unicast still goes to A", ethFrame(podA, hostMAC, 0, 0x0800, nil), 0, fwd.VerdictForward, 1, 0},
		{"B as A on a VLAN", ethFrame(bcastMAC, podA, 5, 0x0800, nil), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedSource},
		{"B from a random address", ethFrame(bcastMAC, net.HardwareAddr{0x02, 9, 9, 9, 9, 9}, 0, 0x0800, nil), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedSource},
		{"B from a multicast address", ethFrame(bcastMAC, net.HardwareAddr{0x03, 0, 0, 0, 0, 0xb}, 0, 0x0800, nil), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedSource},
		{"the uplink sends as A", ethFrame(bcastMAC, podA, 0, 0x0800, nil), 0, fwd.VerdictFlood, all, 0},
		{"A stays pinned on 1", ipv4Frame(podA, podB, 0, "10.99.0.3"), 2, fwd.VerdictForward, 1, 0},
		{"link 3 sends as A: flooded, not learned", ethFrame(bcastMAC, podA, 0, 0x0800, nil), 3, fwd.VerdictFlood, all, 0},
		{"A stays pinned on 1, from the uplink", ethFrame(podA, hostMAC, 0, 0x0800, nil), 0, fwd.VerdictForward, 1, 0},
		{"B's own unicast to the host learned on 0", ipv4Frame(hostMAC, podB, 0, "10.99.0.3"), 2, fwd.VerdictForward, 0, 0},
		{"B's frames reach B", ethFrame(podB, hostMAC, 0, 0x0800, nil), 0, fwd.VerdictForward, 2, 0},
		{"B with A's IPv4 address", ipv4Frame(hostMAC, podB, 0, "10.99.0.2"), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedIP},
		{"B tagged for VLAN 7", ipv4Frame(hostMAC, podB, 7, "10.99.0.3"), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedVLAN},
		{"B's UDP from 0.0.0.0, not to a DHCP server", ipv4Frame(bcastMAC, podB, 0, "0.0.0.0"), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedIP},
		{"B's ARP as A's IP", arpFrame(bcastMAC, podB, podB, "10.99.0.2"), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedIP},
		{"B's ARP with A's sender MAC", arpFrame(bcastMAC, podB, podA, "10.99.0.3"), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedSource},
		{"B's ARP of its own", arpFrame(bcastMAC, podB, podB, "10.99.0.3"), 2, fwd.VerdictFlood, all, 0},
		{"B's ARP probe for another's address", arpFrame(bcastMAC, podB, podB, "0.0.0.0"), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedIP},
		{"B's IPv6 link-local", ipv6Frame(hostMAC, podB, "fe80::28:ff:fe00:b"), 2, fwd.VerdictForward, 0, 0},
		{"B's UDP from ::, not DAD", ipv6Frame(hostMAC, podB, "::"), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedIP},
		{"B's IPv6 with A's address", ipv6Frame(hostMAC, podB, "2001:db8::2"), 2, fwd.VerdictDrop, 0, fwd.CauseSpoofedIP},
		{"A's IPv6 with its own", ipv6Frame(hostMAC, podA, "2001:db8::2"), 1, fwd.VerdictForward, 0, 0},
		{"A advertises its own IPv6 address", naFrame(bcastMAC, podA, "fe80::28:ff:fe00:a", "2001:db8::2"), 1, fwd.VerdictFlood, all, 0},
		{"A advertises its link-local one", naFrame(bcastMAC, podA, "fe80::28:ff:fe00:a", "fe80::28:ff:fe00:a"), 1, fwd.VerdictFlood, all, 0},
		{"A advertises the host's address", naFrame(bcastMAC, podA, "fe80::28:ff:fe00:a", "2001:db8::1"), 1, fwd.VerdictDrop, 0, fwd.CauseSpoofedIP},
		{"link 3 (unsecured) with any IP", ipv4Frame(hostMAC, net.HardwareAddr{0x02, 3, 3, 3, 3, 3}, 0, "10.99.0.2"), 3, fwd.VerdictForward, 0, 0},
	} {
		pkts := []fwd.Packet{{Data: c.data, Len: len(c.data), Link: c.in}}
		sw.Handle(pkts)
		v, out := pkts[0].Verdict()
		cause := pkts[0].Cause()
		if v != c.want || cause != c.cause || v != fwd.VerdictDrop && out != c.out {
			t.Errorf("%s (link %d): verdict %d links %b cause %d; want %d, %b, cause %d", c.name, c.in, v, out, cause, c.want, c.out, c.cause)
		}
	}
	if st := sw.Stats(); st.Moves != 0 {
		t.Errorf("%d moves: a pinned address moved", st.Moves)
	}
	for _, e := range sw.Entries() {
		if e.Link == 1 || e.Link == 2 {
			if !e.Static || (e.Link == 1) != (e.MAC.String() == podA.String()) {
				t.Errorf("entry %+v on a secured link: want only the port's own, static", e)
			}
		}
	}
}

// TestPortSecurityFlood: a pod sending 90k frames from random source
// addresses (a MAC flood) evicts nothing: every frame is dropped as
// spoofed, the table learns none of them, and frames for the other pod
// and for hosts learned on the uplink still go to one link.
func TestPortSecurityFlood(t *testing.T) {
	sw := newTestSwitch(t, 1024)
	// 200 hosts behind the uplink, learned.
	host := func(i int) net.HardwareAddr { return net.HardwareAddr{0x02, 0x28, 1, 0, byte(i >> 8), byte(i)} }
	pkts := make([]fwd.Packet, 64)
	for i := range 200 {
		f := ethFrame(bcastMAC, host(i), 0, 0x0800, nil)
		sw.Handle([]fwd.Packet{{Data: f, Len: len(f), Link: 0}})
	}
	before := sw.Stats()
	rng := rand.New(rand.NewPCG(28, 28))
	frames := make([][]byte, len(pkts))
	for i := range frames {
		frames[i] = ethFrame(bcastMAC, podB, 0, 0x0800, nil)
	}
	spoofed := 0
	for n := 0; n < 90_000; n += len(pkts) {
		for i := range pkts {
			binary.BigEndian.PutUint64(frames[i][4:], rng.Uint64()&^(1<<40)) // bytes 6..11, unicast
			frames[i][4], frames[i][5] = 0xff, 0xff                          // restore the broadcast destination
			pkts[i] = fwd.Packet{Data: frames[i], Len: 60, Link: 2}
		}
		sw.Handle(pkts)
		for i := range pkts {
			if pkts[i].Cause() == fwd.CauseSpoofedSource {
				spoofed++
			}
		}
	}
	st := sw.Stats()
	if spoofed < 90_000 || st.Learned != before.Learned || st.Evictions != before.Evictions {
		t.Errorf("flood: %d of 90000+ spoofed; learned %d→%d, evictions %d→%d: want all spoofed, nothing learned or evicted",
			spoofed, before.Learned, st.Learned, before.Evictions, st.Evictions)
	}
	for i, c := range []struct {
		dst  net.HardwareAddr
		in   int
		want int
	}{{podA, 0, 1}, {podB, 1, 2}, {host(7), 1, 0}, {host(199), 2, 0}} {
		f := ipv4Frame(c.dst, podA, 0, "10.99.0.2")
		if c.in == 2 {
			f = ipv4Frame(c.dst, podB, 0, "10.99.0.3")
		}
		if c.in == 0 {
			f = ipv4Frame(c.dst, hostMAC, 0, "10.99.0.1")
		}
		p := []fwd.Packet{{Data: f, Len: len(f), Link: c.in}}
		sw.Handle(p)
		if v, out := p[0].Verdict(); v != fwd.VerdictForward || out != fwd.LinkSet(c.want) {
			t.Errorf("after the flood, frame %d for %s: verdict %d links %b, want forwarded to %d", i, c.dst, v, out, c.want)
		}
	}
}

// TestSecurePortErrors: what SecurePort refuses, and that a pod moved
// (its link removed, its address given to another link) is found on the
// new one.
func TestSecurePortErrors(t *testing.T) {
	sw := newTestSwitch(t, 1024)
	for _, c := range []struct {
		name string
		link string
		port modes.Port
		in   error // errors.Is, or nil: any error
		ok   bool
	}{
		{"A's address for another link", "s28pc", modes.Port{MAC: podA}, modes.ErrPortInUse, false},
		{"the same again", "s28pa", modes.Port{MAC: podA, IPs: []netip.Addr{netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("2001:db8::2")}}, nil, true},
		{"a multicast address", "s28pc", modes.Port{MAC: net.HardwareAddr{1, 0, 0x5e, 0, 0, 1}}, nil, false},
		{"the zero address", "s28pc", modes.Port{MAC: make(net.HardwareAddr, 6)}, nil, false},
		{"a short address", "s28pc", modes.Port{MAC: net.HardwareAddr{2, 0, 0}}, nil, false},
		{"a multicast IP", "s28pc", modes.Port{MAC: net.HardwareAddr{2, 1, 1, 1, 1, 1}, IPs: []netip.Addr{netip.MustParseAddr("224.0.0.1")}}, nil, false},
		{"no name", "", modes.Port{MAC: net.HardwareAddr{2, 1, 1, 1, 1, 1}}, nil, false},
	} {
		err := sw.SecurePort(c.link, c.port)
		if (err == nil) != c.ok || c.in != nil && !errors.Is(err, c.in) {
			t.Errorf("%s: SecurePort: %v; want ok %v (%v)", c.name, err, c.ok, c.in)
		}
	}
	// An operator's static entry is no port's to take.
	static := net.HardwareAddr{0x02, 0x28, 0, 0, 0, 0x5}
	if err := sw.Table.AddStatic(static, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := sw.SecurePort("s28pc", modes.Port{MAC: static}); !errors.Is(err, modes.ErrPortInUse) {
		t.Errorf("SecurePort of an address static on link 0: %v, want ErrPortInUse", err)
	}
	// Pod A moves: its link goes (the daemon releases it), its address
	// comes back on link 3's index under another name.
	sw.LinkRemoved(1)
	sw.ReleasePort("s28pa")
	if sw.Secured(1) {
		t.Error("link 1 removed: still secured")
	}
	if _, ok := sw.Table.Lookup(fdb.Key(podA, 0), sw.Now()); ok {
		t.Error("link 1 removed: A's entry stayed")
	}
	sw.LinkRemoved(3)
	if err := sw.SecurePort("s28pa2", modes.Port{MAC: podA}); err != nil {
		t.Fatalf("A on another link: %v", err)
	}
	sw.LinkAddedAs(3, "s28pa2")
	if l, ok := sw.Table.Lookup(fdb.Key(podA, 0), sw.Now()); !ok || l != 3 || !sw.Secured(3) {
		t.Errorf("A moved to link 3: found on %d (%v), secured %v", l, ok, sw.Secured(3))
	}
	// A secured link that went without being released (its pod deleted,
	// no CNI DEL yet): its address may go to another link.
	sw.LinkRemoved(2)
	if err := sw.SecurePort("s28pb2", modes.Port{MAC: podB}); err != nil {
		t.Errorf("B's address after B's link went unreleased: %v", err)
	}
	// A link added without port security at a secured index is not secured.
	sw.LinkRemoved(3)
	sw.LinkAddedAs(3, "s28plain")
	if sw.Secured(3) {
		t.Error("an unsecured link at a secured link's old index: secured")
	}
	// A link secured while forwarded: what it learned goes.
	f := ethFrame(bcastMAC, net.HardwareAddr{0x02, 0x28, 3, 3, 3, 3}, 0, 0x0800, nil)
	sw.Handle([]fwd.Packet{{Data: f, Len: len(f), Link: 3}})
	if err := sw.SecurePort("s28plain", modes.Port{MAC: net.HardwareAddr{0x02, 0x28, 3, 3, 3, 4}}); err != nil {
		t.Fatal(err)
	}
	for _, e := range sw.Entries() {
		if e.Link == 3 && !e.Static {
			t.Errorf("link 3 secured while forwarded: learned entry %+v stayed", e)
		}
	}
	if got := len(sw.Ports()); got != 3 {
		t.Errorf("Ports: %v, want 3 (s28pb2, s28pa2, s28plain)", sw.Ports())
	}
}

// TestPortSecurityRace: workers switch frames (a flood of addresses
// on the uplink and on an unsecured link, and, in every other round,
// frames from those links claiming the pods' addresses) while pods come
// and go: secured, added, removed, released. Each pod's address was
// learned on an unsecured link before its add, so every add takes it
// over provisionally. In a quiet round the pod keeps it: its address is
// on its link throughout. In a claiming round the pod loses it: revoked,
// its address learned where it is heard, never on the pod's link again,
// and its own frames dropped. Either way a frame from the link with
// another source is dropped as spoofed, and once all went no static
// entry is left. Run with -race.
func TestPortSecurityRace(t *testing.T) {
	const workers, rounds, pods = 3, 48, 4
	sw := modes.NewSwitch(2, 1024, time.Hour)
	podMAC := func(p int) net.HardwareAddr { return net.HardwareAddr{0x02, 0x28, 0xee, 0, 0, byte(p)} }
	var stop atomic.Bool
	var claims [pods]atomic.Bool  // claim pod p's address from unsecured links
	var present [pods]atomic.Bool // pod p's link is there, secured
	var batches [workers]atomic.Int64
	// hold parks the workers between batches (parked says they are)
	// while a claiming round learns the pod's address elsewhere and adds
	// the pod: a flood of addresses into a full table could evict it in
	// between, and an add takes over provisionally only an address the
	// table knows elsewhere.
	var hold atomic.Bool
	var parked [workers]atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 28))
			pkts := make([]fwd.Packet, 32)
			frames := make([][]byte, len(pkts))
			for i := range frames {
				frames[i] = make([]byte, 60)
			}
			for !stop.Load() {
				if hold.Load() {
					parked[w].Store(true)
					runtime.Gosched()
					continue
				}
				parked[w].Store(false)
				for i := range pkts {
					f := frames[i]
					copy(f[0:6], podMAC(rng.IntN(pods)))
					link := rng.IntN(2 + pods) // 0, 1 unsecured; 2.. the pods' (secured while there)
					switch p := rng.IntN(pods); {
					case rng.IntN(3) == 0 && (link == 2+p && present[p].Load() || link < 2 && claims[p].Load()): // a pod's address, from its link or claimed
						copy(f[6:12], podMAC(p))
					default: // a flood of addresses
						binary.BigEndian.PutUint32(f[8:12], rng.Uint32())
						f[6], f[7] = 0x02, byte(w)
					}
					pkts[i] = fwd.Packet{Data: f, Len: 60, Link: link}
				}
				sw.Handle(pkts)
				batches[w].Add(1)
			}
		})
	}
	// quiesce returns once every worker has started a batch since: none
	// acts on what it read before.
	quiesce := func() {
		var at [workers]int64
		for w := range at {
			at[w] = batches[w].Load()
		}
		for w := range at {
			for batches[w].Load() < at[w]+2 {
				runtime.Gosched()
			}
		}
	}
	within := func(r int, what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Second); !ok(); runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s for 1s", r, what)
			}
		}
	}
	now := sw.Now
	revoked := 0
	for r := range rounds {
		p := r % pods
		name := "s28race" + string(rune('a'+p))
		link := 2 + p
		claim := r%(2*pods) >= pods // each pod: a quiet round, then a claiming one
		claims[p].Store(claim)
		quiesce()
		if claim {
			hold.Store(true)
			for w := range parked {
				for !parked[w].Load() {
					runtime.Gosched()
				}
			}
		}
		// Learned elsewhere before the add, as a pod's that moved.
		f := ethFrame(bcastMAC, podMAC(p), 0, 0x0800, nil)
		sw.Handle([]fwd.Packet{{Data: f, Len: len(f), Link: 1}})
		if err := sw.SecurePort(name, modes.Port{MAC: podMAC(p)}); err != nil {
			t.Fatalf("round %d: SecurePort %s: %v", r, name, err)
		}
		sw.LinkAddedAs(link, name)
		if claim {
			if st := sw.PortStatus(name); st != modes.PortProvisional {
				t.Fatalf("round %d: pod %d added over an address learned on link 1: %v, want provisional", r, p, st)
			}
			hold.Store(false)
		}
		present[p].Store(true)
		if claim {
			within(r, "a claimed address still the pod's", func() bool { return sw.PortStatus(name) == modes.PortRevoked })
			revoked++
		}
		for range 10 {
			l, ok := sw.Table.Lookup(fdb.Key(podMAC(p), 0), now())
			switch {
			case !claim && (!ok || l != link):
				t.Fatalf("round %d: pod %d's address on %d (%v), not its link %d", r, p, l, ok, link)
			case claim && ok && l == link:
				t.Fatalf("round %d: pod %d revoked, its address on its link %d", r, p, link)
			}
			// A spoofed frame from a pod's link is dropped; so is its
			// own, once revoked.
			for _, src := range []net.HardwareAddr{podMAC((p + 1) % pods), podMAC(p)} {
				f := ethFrame(bcastMAC, src, 0, 0x0806, nil)
				pk := []fwd.Packet{{Data: f, Len: len(f), Link: link}}
				sw.Handle(pk)
				if own := src[5] == byte(p); (!own || claim) && pk[0].Cause() != fwd.CauseSpoofedSource {
					t.Fatalf("round %d: a frame from secured link %d from %s (claimed %v): cause %d, want spoofed_source", r, link, src, claim, pk[0].Cause())
				}
			}
			runtime.Gosched()
		}
		claims[p].Store(false)
		present[p].Store(false)
		quiesce()
		sw.LinkRemoved(link)
		sw.ReleasePort(name)
		if sw.Secured(link) {
			t.Fatalf("round %d: link %d removed: still secured", r, link)
		}
	}
	stop.Store(true)
	wg.Wait()
	st := sw.Stats()
	t.Logf("%+v, %d revoked", st, revoked)
	for _, e := range sw.Entries() {
		if e.Static {
			t.Errorf("static entry %+v left after every pod went", e)
		}
	}
}

// BenchmarkSwitchSecured is BenchmarkSwitch with links 1..3 secured: one
// batch of 64 known-unicast frames per op, each frame from a secured
// link checked against its port (its own source address: forwarded).
func BenchmarkSwitchSecured(b *testing.B) { benchSecuredSwitch(b, modes.Limits{}) }

// benchSecuredSwitch runs BenchmarkSwitchSecured's batches with links
// 1..3 also policed to l (none: zero).
func benchSecuredSwitch(b *testing.B, l modes.Limits) {
	sw := modes.NewSwitch(1, 0, 0)
	mac := func(i int) net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 1, byte(i)} }
	for i := 1; i < 4; i++ {
		name := "pod" + string(rune('0'+i))
		if err := sw.SecurePort(name, modes.Port{MAC: mac(i)}); err != nil {
			b.Fatal(err)
		}
		if err := sw.LimitPort(name, l); err != nil {
			b.Fatal(err)
		}
		sw.LinkAddedAs(i, name)
	}
	pkts := make([]fwd.Packet, 64)
	frames := make([][]byte, 64)
	for i := range frames {
		// From link i%4 (host i%4 lives there), to the next link's host.
		frames[i] = make([]byte, 64)
		copy(frames[i], mac((i+1)%4))
		copy(frames[i][6:], mac(i%4))
	}
	b.ReportAllocs()
	for range b.N {
		for i := range pkts {
			pkts[i] = fwd.Packet{Data: frames[i], Len: 64, Link: i % 4}
		}
		sw.Handle(pkts)
	}
	if v, out := pkts[1].Verdict(); v != fwd.VerdictForward || out != 2 {
		b.Fatalf("frame 1: verdict %d, link %d; want forwarded to 2", v, out)
	}
}

// TestPortTakeover: a port's address the switch had learned on another
// link (a pod that moved from another node) is taken over when the port
// is added, provisionally, and said so (an event); heard again where it
// was learned, the port loses it: revoked, said so, its frames dropped,
// the address learned back where it speaks, and a frame for it forwarded
// there. Past the table's age a takeover is for good: the address heard
// elsewhere then is only counted (a conflict).
func TestPortTakeover(t *testing.T) {
	const age = 200 * time.Millisecond
	gw := net.HardwareAddr{0x02, 0x28, 0x9a, 0, 0, 1}
	for _, c := range []struct {
		name    string
		speaks  bool // the address speaks again on the uplink after the add
		waitAge bool // ...only once the takeover is for good
		want    modes.PortStatus
	}{
		{"a pod that moved: nothing speaks after", false, false, modes.PortProvisional},
		{"the gateway's address: it speaks again", true, false, modes.PortRevoked},
		{"speaks again past the age", true, true, modes.PortPinned},
	} {
		t.Run(c.name, func(t *testing.T) {
			sw := modes.NewSwitch(2, 1024, age)
			sw.LinkAddedAs(0, "up")
			sw.LinkAddedAs(1, "other")
			fromGW := ipv4Frame(bcastMAC, gw, 0, "10.99.0.1")
			sw.Handle([]fwd.Packet{{Data: fromGW, Len: len(fromGW), Link: 0}})
			if err := sw.SecurePort("thief", modes.Port{MAC: gw}); err != nil {
				t.Fatalf("SecurePort of an address learned on the uplink: %v", err)
			}
			sw.LinkAddedAs(2, "thief")
			select {
			case e := <-sw.Events():
				if e.Status != modes.PortProvisional || e.Name != "thief" || e.Link != 2 || e.Other != 0 || e.MAC.String() != gw.String() {
					t.Errorf("event %+v; want thief (2) provisional, taken from link 0", e)
				}
			default:
				t.Error("no event for the takeover")
			}
			if st := sw.PortStatus("thief"); st != modes.PortProvisional {
				t.Errorf("after the add: %v, want provisional", st)
			}
			if c.waitAge {
				for deadline := time.Now().Add(5 * age); sw.PortStatus("thief") == modes.PortProvisional; time.Sleep(age / 10) {
					if time.Now().After(deadline) {
						t.Fatal("still provisional past the age")
					}
				}
			}
			if c.speaks {
				sw.Handle([]fwd.Packet{{Data: fromGW, Len: len(fromGW), Link: 0}})
			}
			if st := sw.PortStatus("thief"); st != c.want {
				t.Errorf("status %v, want %v", st, c.want)
			}
			own := ipv4Frame(bcastMAC, gw, 0, "10.99.0.1")
			toGW := ipv4Frame(gw, hostMAC, 0, "10.99.0.7")
			pk := []fwd.Packet{{Data: own, Len: len(own), Link: 2}, {Data: toGW, Len: len(toGW), Link: 1}}
			sw.Handle(pk)
			cause := pk[0].Cause()
			v, out := pk[1].Verdict()
			switch c.want {
			case modes.PortRevoked:
				e := <-sw.Events()
				if e.Status != modes.PortRevoked || e.Link != 2 || e.Other != 0 {
					t.Errorf("event %+v; want thief (2) revoked, heard on 0", e)
				}
				if cause != fwd.CauseSpoofedSource || v != fwd.VerdictForward || out != 0 {
					t.Errorf("revoked: its own frame cause %d (want spoofed_source); a frame for the address: verdict %d to %b, want forwarded to the uplink", cause, v, out)
				}
			default:
				if cause != 0 || v != fwd.VerdictForward || out != 2 {
					t.Errorf("kept: its own frame cause %d (want none); a frame for the address: verdict %d to %b, want forwarded to link 2", cause, v, out)
				}
			}
			if st := sw.Stats(); c.speaks && st.Conflicts != 1 {
				t.Errorf("conflicts %d, want 1", st.Conflicts)
			}
		})
	}
}

// TestPortNoRoom: four ports whose addresses share a table bucket leave
// no room to pin a fifth address of that bucket: its SecurePort is
// refused (ErrPortNoRoom) and changes nothing, rather than leaving the
// port unpinned and its frames flooded.
func TestPortNoRoom(t *testing.T) {
	sw := modes.NewSwitch(2, 1024, time.Minute)
	victim := net.HardwareAddr{0x02, 0x28, 0xbb, 0, 0, 1}
	var same []net.HardwareAddr
	for i := 0; len(same) < 4; i++ {
		m := net.HardwareAddr{0x02, 0x28, 0xcc, byte(i >> 16), byte(i >> 8), byte(i)}
		if sw.Table.Bucket(fdb.Key(m, 0)) == sw.Table.Bucket(fdb.Key(victim, 0)) {
			same = append(same, m)
		}
	}
	for i, m := range same {
		name := fmt.Sprintf("att%d", i)
		if err := sw.SecurePort(name, modes.Port{MAC: m}); err != nil {
			t.Fatal(err)
		}
		sw.LinkAddedAs(2+i, name)
	}
	ports, entries := sw.Ports(), sw.Entries()
	err := sw.SecurePort("victim", modes.Port{MAC: victim})
	if !errors.Is(err, modes.ErrPortNoRoom) || !strings.Contains(err.Error(), "cannot be pinned") {
		t.Errorf("SecurePort of a fifth address of a full bucket: %v, want ErrPortNoRoom", err)
	}
	if fmt.Sprint(sw.Ports()) != fmt.Sprint(ports) || fmt.Sprint(sw.Entries()) != fmt.Sprint(entries) {
		t.Errorf("the refusal changed the switch: ports %v → %v, entries %v → %v", ports, sw.Ports(), entries, sw.Entries())
	}
	// One of the four goes: there is room again.
	sw.LinkRemoved(2)
	sw.ReleasePort("att0")
	if err := sw.SecurePort("victim", modes.Port{MAC: victim}); err != nil {
		t.Fatalf("after one went: %v", err)
	}
	sw.LinkAddedAs(6, "victim")
	if l, ok := sw.Table.Lookup(fdb.Key(victim, 0), sw.Now()); !ok || l != 6 {
		t.Errorf("victim found on %d (%v), want pinned on 6", l, ok)
	}
}

// TestPortHolds: what became of a port's address is the port's name's,
// not its link index's: a revoked port is revoked again when its link is
// added back (a forwarder rebuilt), until it is released or given
// another address; a port restored after a restart (RestorePort) is
// provisional, since the switch has heard nothing yet, and is revoked if
// its address speaks elsewhere; one saved revoked is restored revoked.
func TestPortHolds(t *testing.T) {
	gw := net.HardwareAddr{0x02, 0x28, 0x9a, 0, 0, 1}
	fromGW := ipv4Frame(bcastMAC, gw, 0, "10.99.0.1")
	own := ipv4Frame(bcastMAC, gw, 0, "10.99.0.1")
	sends := func(sw *modes.Switch, link int) bool {
		p := []fwd.Packet{{Data: own, Len: len(own), Link: link}}
		sw.Handle(p)
		return p[0].Cause() == 0
	}
	t.Run("revoked, rebuilt", func(t *testing.T) {
		sw := modes.NewSwitch(2, 1024, time.Minute)
		sw.LinkAddedAs(0, "up")
		sw.Handle([]fwd.Packet{{Data: fromGW, Len: len(fromGW), Link: 0}})
		sw.SecurePort("thief", modes.Port{MAC: gw})
		sw.LinkAddedAs(1, "thief")
		sw.Handle([]fwd.Packet{{Data: fromGW, Len: len(fromGW), Link: 0}})
		if st := sw.PortStatus("thief"); st != modes.PortRevoked {
			t.Fatalf("%v, want revoked", st)
		}
		sw.LinkRemoved(1) // the forwarder rebuilt: its links removed, added back
		sw.LinkAddedAs(2, "thief")
		if st := sw.PortStatus("thief"); st != modes.PortRevoked || sends(sw, 2) {
			t.Errorf("added back: %v, sends %v; want revoked, sending nothing", st, sends(sw, 2))
		}
		if l, ok := sw.Table.Lookup(fdb.Key(gw, 0), sw.Now()); !ok || l != 0 {
			t.Errorf("the gateway's address on %d (%v), want the uplink's", l, ok)
		}
		sw.SecurePort("thief", modes.Port{MAC: net.HardwareAddr{0x02, 0x28, 0x9a, 0, 0, 2}})
		if st := sw.PortStatus("thief"); st != modes.PortPinned {
			t.Errorf("given another address: %v, want pinned", st)
		}
	})
	for _, c := range []struct {
		name    string
		revoked bool
		speaks  bool
		want    modes.PortStatus
	}{
		{"restored, nothing speaks", false, false, modes.PortProvisional},
		{"restored, its address speaks elsewhere", false, true, modes.PortRevoked},
		{"restored revoked", true, false, modes.PortRevoked},
	} {
		t.Run(c.name, func(t *testing.T) {
			sw := modes.NewSwitch(2, 1024, time.Minute)
			sw.LinkAddedAs(0, "up")
			if err := sw.RestorePort("pod", modes.Port{MAC: gw}, c.revoked); err != nil {
				t.Fatal(err)
			}
			sw.LinkAddedAs(1, "pod")
			if c.speaks {
				sw.Handle([]fwd.Packet{{Data: fromGW, Len: len(fromGW), Link: 0}})
			}
			if st := sw.PortStatus("pod"); st != c.want || sends(sw, 1) != (c.want != modes.PortRevoked) {
				t.Errorf("%v, sends %v; want %v", st, sends(sw, 1), c.want)
			}
		})
	}
}

// TestSwitchExportImport: a successor's switch, its links added at the
// indices the predecessor had them, takes the predecessor's state: ports
// (pinned, provisional with what is left of it, revoked), limits with
// their buckets' debts, and the learned addresses with their age; what it
// exports then is what the predecessor exported, and it behaves so.
func TestSwitchExportImport(t *testing.T) {
	gw := net.HardwareAddr{0x02, 0x28, 0x9a, 0, 0, 1}
	moved := net.HardwareAddr{0x02, 0x28, 0x9a, 0, 0, 2}
	host := net.HardwareAddr{0x02, 0x28, 0x9a, 0, 0, 3}
	old := modes.NewSwitch(2, 1024, time.Minute)
	names := []string{"up", "pinned", "thief", "moved"}
	for _, n := range []string{"up"} {
		old.LinkAddedAs(0, n)
	}
	for _, m := range []net.HardwareAddr{gw, moved, host} {
		f := ipv4Frame(bcastMAC, m, 0, "10.99.0.1")
		old.Handle([]fwd.Packet{{Data: f, Len: len(f), Link: 0}})
	}
	lim := modes.Limits{IngressRate: 1000, IngressBurst: 3 * 1000 * 8}
	for i, c := range []struct {
		name string
		mac  net.HardwareAddr
	}{{"pinned", podA}, {"thief", gw}, {"moved", moved}} {
		if err := old.SecurePort(c.name, modes.Port{MAC: c.mac, IPs: []netip.Addr{netip.MustParseAddr("10.99.0.2")}}); err != nil {
			t.Fatal(err)
		}
		old.LinkAddedAs(i+1, c.name)
	}
	if err := old.LimitPort("pinned", lim); err != nil {
		t.Fatal(err)
	}
	// The gateway speaks: the thief is revoked; the moved pod stays
	// provisional. The limited pod spends its bucket.
	f := ipv4Frame(bcastMAC, gw, 0, "10.99.0.1")
	old.Handle([]fwd.Packet{{Data: f, Len: len(f), Link: 0}})
	big := append(ipv4Frame(podA, hostMAC, 0, "10.99.0.1"), make([]byte, 900)...)
	for range 4 {
		old.Handle([]fwd.Packet{{Data: big, Len: len(big), Link: 0}})
	}
	st := old.Export()
	b, _ := json.Marshal(st)
	var back modes.SwitchState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	next := modes.NewSwitch(2, 1024, time.Minute)
	for i, n := range names {
		next.LinkAddedAs(i, n)
	}
	if err := next.Import(back); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want modes.PortStatus
	}{{"pinned", modes.PortPinned}, {"thief", modes.PortRevoked}, {"moved", modes.PortProvisional}} {
		if got := next.PortStatus(c.name); got != c.want {
			t.Errorf("%s: %v after the import, want %v", c.name, got, c.want)
		}
	}
	again := next.Export()
	if len(again.Learned) != len(st.Learned) || len(again.Ports) != 3 || len(again.Limits) != 1 {
		t.Errorf("re-exported %+v, want as %+v", again, st)
	}
	if st.Limits[0].InDebt <= 0 || again.Limits[0].InDebt < st.Limits[0].InDebt-time.Second {
		t.Errorf("bucket debt %v, re-exported %v", st.Limits[0].InDebt, again.Limits[0].InDebt)
	}
	// The limited pod's bucket is as spent as it was: a frame for it is
	// over its rate.
	p := []fwd.Packet{{Data: big, Len: len(big), Link: 0}}
	next.Handle(p)
	if p[0].Cause() != fwd.CauseRateLimited {
		t.Errorf("a frame for the spent pod after the import: cause %d, want rate_limited", p[0].Cause())
	}
	// The revoked thief sends nothing; the host is found on the uplink.
	own := ipv4Frame(bcastMAC, gw, 0, "10.99.0.2")
	p = []fwd.Packet{{Data: own, Len: len(own), Link: 2}, {Data: ipv4Frame(host, podA, 0, "10.99.0.2"), Len: 60, Link: 1}}
	next.Handle(p)
	if v, out := p[1].Verdict(); p[0].Cause() != fwd.CauseSpoofedSource || v != fwd.VerdictForward || out != 0 {
		t.Errorf("after the import: the thief's frame cause %d; a frame for the host verdict %d to %d", p[0].Cause(), v, out)
	}
}
