package modes_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
)

// run starts a forwarder over links with h; cleanup stops it and checks
// the UMEM came back whole.
func run(t *testing.T, links []string, h fwd.Handler, queues int) *fwd.Forwarder {
	t.Helper()
	return runConfig(t, fwd.Config{Links: links, Handler: h, Queues: queues})
}

// runConfig is run with the whole configuration.
func runConfig(t *testing.T, cfg fwd.Config) *fwd.Forwarder {
	t.Helper()
	f, err := fwd.New(cfg)
	if err != nil {
		t.Fatalf("fwd.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		s, err := f.Shutdown()
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if s.UMEM.LeakedAddresses != 0 || s.UMEM.OwnershipViolations != 0 {
			t.Errorf("UMEM after stop: %d leaked, %d ownership violations", s.UMEM.LeakedAddresses, s.UMEM.OwnershipViolations)
		}
	})
	return f
}

func pair(t *testing.T, opt topo.Options) *topo.Pair {
	t.Helper()
	topo.RequireRoot(t)
	p, err := topo.NewPair(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// rawSocket is an AF_PACKET socket on ifname in ns: send, and receive
// every frame (ETH_P_ALL).
func rawSocket(t *testing.T, ns *topo.NS, ifname string) (fd int, ifindex int) {
	t.Helper()
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		ifindex = ifi.Index
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		// Room for a whole burst: the test reads only once it has sent.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000})
	return fd, ifindex
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// testFrame is an Ethernet frame of the local experimental EtherType, which
// no stack answers, carrying marker and seq.
func testFrame(dst, src net.HardwareAddr, marker uint32, seq uint32) []byte {
	b := make([]byte, 64)
	copy(b, dst)
	copy(b[6:], src)
	binary.BigEndian.PutUint16(b[12:], 0x88b5)
	binary.BigEndian.PutUint32(b[14:], marker)
	binary.BigEndian.PutUint32(b[18:], seq)
	return b
}

// udpTestFrame is a UDP frame from one of 16 source ports (so the sending
// veth spreads them over its queues by flow hash) carrying marker and seq
// where testFrame has them, 28 bytes further in.
func udpTestFrame(dst, src net.HardwareAddr, marker, seq uint32) []byte {
	b := topo.UDPFrame(dst, src, netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), uint16(1000+seq%16), 9, 90)
	binary.BigEndian.PutUint32(b[42:], marker)
	binary.BigEndian.PutUint32(b[46:], seq)
	return b
}

// collect reads frames of marker from fd until quiet for the read timeout
// after deadline, returning them by seq: testFrame's, or with udp set
// udpTestFrame's.
func collect(fd int, marker uint32, until time.Time, udp ...bool) map[uint32][]byte {
	off := 14
	if len(udp) > 0 && udp[0] {
		off = 42
	}
	got := map[uint32][]byte{}
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if time.Now().After(until) {
				return got
			}
			continue
		}
		if n < off+8 || binary.BigEndian.Uint32(buf[off:]) != marker {
			continue
		}
		if off == 14 && binary.BigEndian.Uint16(buf[12:]) != 0x88b5 {
			continue
		}
		got[binary.BigEndian.Uint32(buf[off+4:])] = append([]byte(nil), buf[:n]...)
	}
}

// TestReflect: every frame a host sends to the reflector comes back to it
// once, with its MAC addresses swapped and nothing else changed, over two
// queues; the forwarder counts exactly what it reflected.
func TestReflect(t *testing.T) {
	p := pair(t, topo.Options{Queues: 2})
	f := run(t, []string{p.LinkA}, modes.Reflect, 2)
	fd, ifindex := rawSocket(t, p.A, p.PeerA)
	var src net.HardwareAddr
	p.A.Do(func() error { ifi, err := net.InterfaceByName(p.PeerA); src = ifi.HardwareAddr; return err })
	dst := net.HardwareAddr{0x02, 0, 0, 0, 0xbe, 0xef}
	const n, marker = 2000, 0x7e71ec70
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = udpTestFrame(dst, src, marker, uint32(i))
		if err := unix.Sendto(fd, frames[i], 0, &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}); err != nil {
			t.Fatal(err)
		}
		if i%64 == 63 {
			time.Sleep(200 * time.Microsecond)
		}
	}
	got := collect(fd, marker, time.Now().Add(time.Second), true)
	bad := 0
	for i, fr := range frames {
		want := append([]byte(nil), fr...)
		fwd.SwapMACs(want)
		if g, ok := got[uint32(i)]; !ok || !bytes.Equal(g[:len(want)], want) {
			bad++
		}
	}
	a := f.LinkStats(0)
	var perQueue []uint64
	for q := range 2 {
		perQueue = append(perQueue, f.QueueStats(0, q).TXPackets)
	}
	t.Logf("%d sent, %d came back (%d missing or altered); link rx %d tx %d, tx per queue %v, drops %v", n, len(got), bad, a.RXPackets, a.TXPackets, perQueue, a.Drops)
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Errorf("reflected per queue %v: the test should use both queues", perQueue)
	}
	if bad != 0 {
		t.Errorf("%d of %d frames did not come back with swapped MACs", bad, n)
	}
	// The link also sees what the namespace sends on its own (IPv6 ND):
	// reflected as well, so rx and tx agree exactly.
	if a.RXPackets != a.TXPackets || a.TXPackets < n {
		t.Errorf("reflected %d of %d received frames (sent %d of ours)", a.TXPackets, a.RXPackets, n)
	}
}

// TestSink: every frame sent is counted, exactly, on the queue it arrived
// on, and none leaves.
func TestSink(t *testing.T) {
	p := pair(t, topo.Options{Queues: 2})
	f := run(t, []string{p.LinkA}, modes.Sink, 2)
	fd, ifindex := rawSocket(t, p.A, p.PeerA)
	dst := net.HardwareAddr{0x02, 0, 0, 0, 0xbe, 0xef}
	src := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	before := f.LinkStats(0).RXPackets
	const n = 5000
	for i := range n {
		if err := unix.Sendto(fd, udpTestFrame(dst, src, 1, uint32(i)), 0, &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.LinkStats(0).RXPackets-before < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	a := f.LinkStats(0)
	var sum uint64
	var perQueue []uint64
	for q := range 2 {
		s := f.QueueStats(0, q)
		perQueue = append(perQueue, s.RXPackets)
		sum += s.RXPackets
	}
	t.Logf("link rx %d (ours %d), per queue %v, tx %d, handler drops %d", a.RXPackets, n, perQueue, a.TXPackets, a.Drops[fwd.DropHandler])
	if got := a.RXPackets - before; got < n {
		t.Errorf("counted %d of %d frames", got, n)
	}
	if sum != a.RXPackets {
		t.Errorf("per-queue counts sum to %d, link to %d", sum, a.RXPackets)
	}
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Errorf("per queue %v: the test should use both queues", perQueue)
	}
	if a.TXPackets != 0 || a.Drops[fwd.DropHandler] != a.RXPackets {
		t.Errorf("sink: %d sent, %d dropped of %d received", a.TXPackets, a.Drops[fwd.DropHandler], a.RXPackets)
	}
}

func hosts(t *testing.T, n int, opt topo.Options) *topo.Hosts {
	t.Helper()
	topo.RequireRoot(t)
	h, err := topo.NewHosts(n, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestSwitch: four hosts on four links of one switching xdpfwd. Every pair
// pings and moves 16 MiB of TCP byte-exact, both ways; broadcast reaches
// every other host once; an unknown destination is flooded until it is
// learned, then goes to one link only; the table stays within its size
// under a flood of random source addresses.
func TestSwitch(t *testing.T) {
	h := hosts(t, 4, topo.Options{TxChecksum: true, Queues: 2})
	sw := modes.NewSwitch(len(h.Links), 256, 300*time.Second)
	f := run(t, h.Links, sw, 2)
	for i := range h.NS {
		for j := range h.NS {
			if i == j {
				continue
			}
			if _, err := topo.Ping(h.NS[i], h.V4[j], 3, 3*time.Second); err != nil {
				t.Errorf("ping host %d → %d: %v", i, j, err)
			}
		}
	}
	for i := range h.NS {
		for j := i + 1; j < len(h.NS); j++ {
			res, err := topo.TCPTransfer(h.NS[i], h.NS[j], h.V4[j], 16<<20, 30*time.Second)
			if err != nil {
				t.Errorf("TCP %d → %d: %v", i, j, err)
				continue
			}
			t.Logf("TCP %d → %d: 16 MiB byte-exact, %.2f Gbit/s", i, j, res.Gbps)
		}
	}
	st := sw.Table.Stats()
	t.Logf("fdb after traffic: %+v; entries %v", st, sw.Table.Entries(sw.Now()))
	if len(sw.Table.Entries(sw.Now())) < len(h.NS) {
		t.Errorf("the switch learned %d addresses, want the %d hosts'", len(sw.Table.Entries(sw.Now())), len(h.NS))
	}

	t.Run("broadcast", func(t *testing.T) { switchBroadcast(t, h) })
	t.Run("learning", func(t *testing.T) { switchLearning(t, h, sw) })
	t.Run("bounded", func(t *testing.T) { switchBounded(t, h, sw) })
	for i := range h.Links {
		s := f.LinkStats(i)
		t.Logf("link %d: rx %d tx %d drops %v", i, s.RXPackets, s.TXPackets, s.Drops)
	}
}

// switchBroadcast: a broadcast frame from host 0 reaches each other host
// exactly once, and not host 0.
func switchBroadcast(t *testing.T, h *topo.Hosts) {
	fds := make([]int, len(h.NS))
	var idx0 int
	for i := range h.NS {
		fds[i], idx0 = rawSocketIdx(t, h, i, idx0)
	}
	src := macOf(t, h.NS[0])
	const marker = 0xb7ca57
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for s := range 10 {
		if err := unix.Sendto(fds[0], testFrame(bcast, src, marker, uint32(s)), 0, &unix.SockaddrLinklayer{Ifindex: ifindexOf(t, h.NS[0]), Halen: 6}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(h.NS); i++ {
		got := collect(fds[i], marker, time.Now().Add(300*time.Millisecond))
		if len(got) != 10 {
			t.Errorf("host %d saw %d of 10 broadcast frames", i, len(got))
		}
	}
}

// switchLearning: frames to an address nobody has used are flooded to
// every other host; once that address has sent a frame from host 2, they
// reach host 2 only.
func switchLearning(t *testing.T, h *topo.Hosts, sw *modes.Switch) {
	fds := make([]int, len(h.NS))
	for i := range h.NS {
		fds[i], _ = rawSocketIdx(t, h, i, 0)
	}
	ghost := net.HardwareAddr{0x02, 0x6e, 0x65, 0x77, 0, 2}
	src := macOf(t, h.NS[0])
	const unknown, known = 0x5eed01, 0x5eed02
	send := func(i int, fr []byte) {
		if err := unix.Sendto(fds[i], fr, 0, &unix.SockaddrLinklayer{Ifindex: ifindexOf(t, h.NS[i]), Halen: 6}); err != nil {
			t.Fatal(err)
		}
	}
	send(0, testFrame(ghost, src, unknown, 0))
	for i := 1; i < len(h.NS); i++ {
		if got := collect(fds[i], unknown, time.Now().Add(300*time.Millisecond)); len(got) != 1 {
			t.Errorf("unknown unicast: host %d saw %d frames, want 1 (flooded)", i, len(got))
		}
	}
	// The ghost address speaks from host 2: now it is known there.
	send(2, testFrame(src, ghost, 0x5eed00, 0))
	deadline := time.Now().Add(2 * time.Second)
	for {
		if l, ok := sw.Table.Lookup(fdb.Key(ghost, 0), sw.Now()); ok && l == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the switch did not learn the address on link 2")
		}
		time.Sleep(5 * time.Millisecond)
	}
	send(0, testFrame(ghost, src, known, 1))
	for i := 1; i < len(h.NS); i++ {
		want := 0
		if i == 2 {
			want = 1
		}
		if got := collect(fds[i], known, time.Now().Add(300*time.Millisecond)); len(got) != want {
			t.Errorf("known unicast: host %d saw %d frames, want %d", i, len(got), want)
		}
	}
	// It moves to host 3: relearned there, counted as a move.
	moves := sw.Table.Stats().Moves
	send(3, testFrame(src, ghost, 0x5eed00, 1))
	deadline = time.Now().Add(2 * time.Second)
	for {
		if l, ok := sw.Table.Lookup(fdb.Key(ghost, 0), sw.Now()); ok && l == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the switch did not relearn the address on link 3")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if sw.Table.Stats().Moves <= moves {
		t.Errorf("a MAC that moved to another link was not counted as a move: %+v", sw.Table.Stats())
	}
}

// switchBounded: 5,000 random source addresses from host 1 leave the table
// within its size, and the hosts still reach each other.
func switchBounded(t *testing.T, h *topo.Hosts, sw *modes.Switch) {
	fd, _ := rawSocketIdx(t, h, 1, 0)
	dst := macOf(t, h.NS[0])
	for i := range 5000 {
		src := net.HardwareAddr{0x02, 0xf1, 0x00, byte(i >> 16), byte(i >> 8), byte(i)}
		if err := unix.Sendto(fd, testFrame(dst, src, 0xf100d, uint32(i)), 0, &unix.SockaddrLinklayer{Ifindex: ifindexOf(t, h.NS[1]), Halen: 6}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for sw.Table.Stats().Learned < 1000 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := sw.Table.Stats()
	n := len(sw.Table.Entries(sw.Now()))
	t.Logf("after 5,000 random sources: %d entries of %d, %+v", n, st.Size, st)
	if n > st.Size {
		t.Errorf("%d entries in a table of %d", n, st.Size)
	}
	if st.Evictions == 0 {
		t.Errorf("no evictions after 5,000 addresses in a table of %d", st.Size)
	}
	for j := 1; j < len(h.NS); j++ {
		if _, err := topo.Ping(h.NS[0], h.V4[j], 3, 3*time.Second); err != nil {
			t.Errorf("after the flood, ping host 0 → %d: %v", j, err)
		}
	}
}

func rawSocketIdx(t *testing.T, h *topo.Hosts, i, _ int) (int, int) {
	fd, idx := rawSocket(t, h.NS[i], "eth0")
	return fd, idx
}

func ifindexOf(t *testing.T, ns *topo.NS) int {
	t.Helper()
	var idx int
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err == nil {
			idx = ifi.Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return idx
}

func macOf(t *testing.T, ns *topo.NS) net.HardwareAddr {
	t.Helper()
	mac, err := ns.HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// TestSwitchLinkDown: with one host's link down, the others still reach
// each other through a switch with two workers (so frames cross between
// them through the handoff rings): what is for the down link is dropped
// and counted, instead of filling the rings and stopping every link.
func TestSwitchLinkDown(t *testing.T) {
	h := hosts(t, 3, topo.Options{Queues: 2, TxChecksum: true})
	sw := modes.NewSwitch(len(h.Links), 0, 0)
	f := run(t, h.Links, sw, 2)
	for j := 1; j < 3; j++ {
		if _, err := topo.Ping(h.NS[0], h.V4[j], 2, 3*time.Second); err != nil {
			t.Fatalf("ping host 0 → %d before: %v", j, err)
		}
	}
	l, err := netlink.LinkByName(h.Links[2])
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	// Broadcasts flood towards the down link too, for a few seconds.
	fd, _ := rawSocketIdx(t, h, 0, 0)
	src := macOf(t, h.NS[0])
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	stop := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(stop); i++ {
		unix.Sendto(fd, testFrame(bcast, src, 0xd0d0, uint32(i)), 0, &unix.SockaddrLinklayer{Ifindex: ifindexOf(t, h.NS[0]), Halen: 6})
		if i%100 == 99 {
			time.Sleep(time.Millisecond)
		}
	}
	if _, err := topo.Ping(h.NS[0], h.V4[1], 5, 5*time.Second); err != nil {
		t.Errorf("ping host 0 → 1 with link 2 down: %v", err)
	}
	if _, err := topo.TCPTransfer(h.NS[0], h.NS[1], h.V4[1], 4<<20, 20*time.Second); err != nil {
		t.Errorf("TCP host 0 → 1 with link 2 down: %v", err)
	}
	s := f.LinkStats(2)
	t.Logf("down link: tx %d, drops %v", s.TXPackets, s.Drops)
	if s.Drops[fwd.DropTXFull] == 0 {
		t.Errorf("nothing counted as tx_full on the down link: %v", s.Drops)
	}
	netlink.LinkSetUp(l)
}

// TestSwitchFloodSizes: a broadcast frame of any size reaches every other
// host once, with the frag zone (--frag-order 4) and without it (off). A
// flood's copies cannot leave from the frame the packet arrived in (the
// packet itself does, out of the last link): a copy over the inline limit
// (256 bytes) goes to a frag block, or, with no frag zone, to a frame of
// its own; none may be dropped as tx_no_layout.
func TestSwitchFloodSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		fragOrder int
	}{{"frag-order 4", 4}, {"frag-order off", fwd.FragOff}} {
		t.Run(c.name, func(t *testing.T) {
			h := hosts(t, 3, topo.Options{})
			sw := modes.NewSwitch(len(h.Links), 256, 300*time.Second)
			f := runConfig(t, fwd.Config{Links: h.Links, Handler: sw, FragOrder: c.fragOrder})
			fds := make([]int, len(h.NS))
			for i := range h.NS {
				fds[i], _ = rawSocketIdx(t, h, i, 0)
			}
			src := macOf(t, h.NS[0])
			bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
			const per = 10
			for k, size := range []int{64, 256, 257, 1000, 1514} {
				marker := uint32(0xf100d0 + k)
				for s := range per {
					fr := append(testFrame(bcast, src, marker, uint32(s)), make([]byte, size-64)...)
					if err := unix.Sendto(fds[0], fr, 0, &unix.SockaddrLinklayer{Ifindex: ifindexOf(t, h.NS[0]), Halen: 6}); err != nil {
						t.Fatal(err)
					}
				}
				for i := 1; i < len(h.NS); i++ {
					got := collect(fds[i], marker, time.Now().Add(300*time.Millisecond))
					bad := 0
					for _, fr := range got {
						if len(fr) != size {
							bad++
						}
					}
					if len(got) != per || bad != 0 {
						t.Errorf("%d-byte broadcast: host %d saw %d of %d frames (%d of the wrong length)", size, i, len(got), per, bad)
					}
				}
			}
			for i := range h.Links {
				if s := f.LinkStats(i); s.Drops[fwd.DropTXNoRoom] != 0 {
					t.Errorf("link %d: %s = %d", i, fwd.DropTXNoRoom, s.Drops[fwd.DropTXNoRoom])
				}
			}
		})
	}
}
