package xsk_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// xdpPacketHeadroom is the kernel's XDP_PACKET_HEADROOM: in copy mode the
// packet is copied this far into the chunk handed over on the fill ring.
const xdpPacketHeadroom = 256

const testRingSize = 1024

func newPair(t *testing.T) *topo.Pair {
	t.Helper()
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after the pair is closed.
	t.Cleanup(func() { checkGone(t, p) })
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close pair %s: %v", p.Name, err)
		}
	})
	return p
}

// newRegion maps the UMEM. Registered first, its cleanup runs after the
// sockets' (cleanups run last-in first-out).
func newRegion(t *testing.T) *umem.Region {
	t.Helper()
	r, err := umem.New(umem.Config{FrameSize: 2048, Frames: 4096, InlineSlots: 256, HugePages: umem.HugePagesAuto})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("unmap region: %v", err)
		}
	})
	return r
}

func ifindex(t *testing.T, name string) int {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

func attach(t *testing.T, link string) *xsk.Program {
	t.Helper()
	prog, err := xsk.Attach(link, ifindex(t, link), xsk.AttachConfig{})
	if err != nil {
		t.Fatalf("Attach %s: %v", link, err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

func open(t *testing.T, r *umem.Region, link string, shared *xsk.Socket) *xsk.Socket {
	t.Helper()
	s, err := xsk.Open(r, xsk.Config{Ifname: link, Ifindex: ifindex(t, link), Queue: 0, RingSize: testRingSize, Shared: shared})
	if err != nil {
		t.Fatalf("Open %s: %v", link, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// xdpProgID is the id of the XDP program on link, 0 if none.
func xdpProgID(t *testing.T, link string) uint32 {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && (x.Attached || x.ProgId != 0) {
		return x.ProgId
	}
	return 0
}

// xdpProgMode is the id and attach mode (nl.XDP_ATTACHED_*) of the XDP
// program on link; 0, 0 if none.
func xdpProgMode(t *testing.T, link string) (id, mode uint32) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && (x.Attached || x.ProgId != 0) {
		return x.ProgId, x.AttachMode
	}
	return 0, 0
}

// nsLink reads a link's MAC address and RX packet count inside ns.
func nsLink(t *testing.T, ns *topo.NS, name string) (net.HardwareAddr, uint64) {
	t.Helper()
	var mac net.HardwareAddr
	var rx uint64
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		mac = l.Attrs().HardwareAddr
		if st := l.Attrs().Statistics; st != nil {
			rx = st.RxPackets
		}
		return nil
	})
	if err != nil {
		t.Fatalf("look up %s in %s: %v", name, ns.Name, err)
	}
	return mac, rx
}

// TestReceiveThenTransmitSharedUMEM receives real frames on LinkA's socket and sends
// one of them, from the buffer it arrived in, out of LinkB's socket, which
// shares the UMEM: a UMEM mapped alone, and the second of two mapped back
// to back (umem.NewSpace), whose rings hold offsets of its own while the
// process names its bytes by their place in the mapping.
func TestReceiveThenTransmitSharedUMEM(t *testing.T) {
	t.Run("alone", func(t *testing.T) { testReceiveThenTransmit(t, newRegion(t)) })
	t.Run("second-of-a-space", func(t *testing.T) { testReceiveThenTransmit(t, newSpaceRegion(t)) })
}

// newSpaceRegion maps two UMEMs back to back and returns the second, its
// addresses starting past the first's; both are closed at cleanup.
func newSpaceRegion(t *testing.T) *umem.Region {
	t.Helper()
	cfg := umem.Config{FrameSize: 2048, Frames: 4096, InlineSlots: 256, HugePages: umem.HugePagesAuto}
	rs, err := umem.NewSpace(cfg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range rs {
			if err := r.Close(); err != nil {
				t.Errorf("unmap region: %v", err)
			}
		}
	})
	if rs[1].Base() == 0 || !rs[1].Frames.Contains(rs[1].Frames.Base()) || rs[0].Contains(rs[1].Frames.Base()) {
		t.Fatalf("second region at %#x: not past the first (%d bytes)", rs[1].Base(), rs[0].Size())
	}
	return rs[1]
}

func testReceiveThenTransmit(t *testing.T, r *umem.Region) {
	p := newPair(t)
	prog := attach(t, p.LinkA)
	sa := open(t, r, p.LinkA, nil)
	sb := open(t, r, p.LinkB, sa)
	t.Logf("xdp mode %s, region %s, %d bytes", prog.Mode(), r.Backing(), r.Size())

	for _, s := range []*xsk.Socket{sa, sb} {
		if got := s.BindMode(); got != "copy" {
			t.Errorf("%s: BindMode = %q, want copy on veth", s.Ifname(), got)
		}
		if s.ZeroCopy() {
			t.Errorf("%s: ZeroCopy() true on veth", s.Ifname())
		}
		if s.Queue() != 0 {
			t.Errorf("%s: Queue = %d", s.Ifname(), s.Queue())
		}
		// Fill and completion rings default to twice the RX/TX rings.
		for _, rs := range []struct {
			name       string
			size, want uint32
		}{
			{"fill", s.Fill.Size(), 2 * testRingSize},
			{"comp", s.Comp.Size(), 2 * testRingSize},
			{"rx", s.RX.Size(), testRingSize},
			{"tx", s.TX.Size(), testRingSize},
		} {
			if rs.size != rs.want {
				t.Errorf("%s: %s ring size %d, want %d", s.Ifname(), rs.name, rs.size, rs.want)
			}
		}
	}
	// Lend a full fill ring of frames to the kernel, before the program
	// points at the socket: a packet in between would find no frame.
	frames := r.Frames
	cache := frames.NewCache(frames.Len())
	filled := map[uint64]bool{}
	n, idx := sa.Fill.Reserve(sa.Fill.Size())
	if n != sa.Fill.Size() {
		t.Fatalf("fresh fill ring: reserved %d of %d", n, sa.Fill.Size())
	}
	for k := range n {
		a, ok := cache.Alloc(umem.KernelRX)
		if !ok {
			t.Fatalf("frame zone exhausted after %d", k)
		}
		sa.Fill.SetAddr(idx+k, a)
		filled[a] = true
	}
	sa.Fill.Submit(n)
	if sa.Fill.NeedsWakeup() {
		sa.WakeRX()
	}
	if err := prog.Register(0, sa); err != nil {
		t.Fatal(err)
	}

	macA, _ := nsLink(t, p.A, p.PeerA)
	_, rxB0 := nsLink(t, p.B, p.PeerB)

	// Nothing answers A: its ARP requests (and ping) go into LinkA, where
	// the program redirects them to sa.
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		topo.Ping(p.A, p.V4B, 1, 300*time.Millisecond) // no reply: error expected
	}()
	mem := r.Mem()
	type rxFrame struct {
		addr uint64 // flat
		len  uint32
	}
	var rx []rxFrame
	arp := -1 // index in rx of the first ARP request
	// check validates one RX descriptor and takes its frame.
	check := func(k int, d xsk.Desc) {
		a := xsk.Flat(d.Addr)
		if !frames.Contains(a) {
			t.Fatalf("RX %d: address %#x (raw %#x) outside the frame zone", k, a, d.Addr)
		}
		base := frames.UnitAddr(a)
		off := a - base
		if !filled[base] {
			t.Errorf("RX %d: address %#x is in frame %#x, which was not on the fill ring (or came back twice)", k, a, base)
		}
		delete(filled, base)
		if off < xdpPacketHeadroom {
			t.Errorf("RX %d: data at offset %d into its frame, want >= %d (XDP_PACKET_HEADROOM)", k, off, xdpPacketHeadroom)
		}
		if d.Len < 42 {
			t.Errorf("RX %d: length %d, shorter than an ARP frame", k, d.Len)
		}
		if off+uint64(d.Len) > uint64(frames.UnitSize()) {
			t.Fatalf("RX %d: %d bytes at offset %d overrun the %d-byte frame", k, d.Len, off, frames.UnitSize())
		}
		if !frames.Move(a, umem.KernelRX, umem.Held) {
			t.Errorf("RX %d: frame %#x was not with the kernel", k, base)
		}
		pkt := mem[a : a+uint64(d.Len)]
		if src := net.HardwareAddr(pkt[6:12]); !bytes.Equal(src, macA) {
			t.Errorf("RX %d: source MAC %s, want A's %s", k, src, macA)
		}
		et := binary.BigEndian.Uint16(pkt[12:14])
		t.Logf("RX %d: raw addr %#x flat %#x (frame %#x + %d) len %d ethertype %#04x", k, d.Addr, a, base, off, d.Len, et)
		if et == unix.ETH_P_ARP && arp < 0 {
			arp = len(rx)
		}
		rx = append(rx, rxFrame{a, d.Len})
	}
	// A may send IPv6 neighbour discovery or MLD first: keep receiving
	// until the ARP request for B's address is in.
	deadline := time.Now().Add(2 * time.Second)
	for arp < 0 && time.Now().Before(deadline) {
		if n, idx := sa.RX.Peek(sa.RX.Size()); n > 0 {
			for k := range n {
				check(len(rx), sa.RX.Desc(idx+k))
			}
			sa.RX.Release(n)
			continue
		}
		pfd := []unix.PollFd{{Fd: int32(sa.FD()), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(time.Until(deadline)/time.Millisecond)+1); err != nil && err != unix.EINTR {
			t.Fatalf("poll: %v", err)
		}
	}
	<-pingDone
	if len(rx) == 0 {
		st, _ := sa.Stats()
		t.Fatalf("no RX descriptor within 2 s (stats %+v)", st)
	}
	if arp < 0 {
		t.Fatalf("no ARP request among the %d received frames", len(rx))
	}

	st, err := sa.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s stats: %+v", p.LinkA, st)
	if st.Rx_invalid_descs != 0 || st.Rx_dropped != 0 {
		t.Errorf("%s: %d invalid RX descriptors, %d dropped", p.LinkA, st.Rx_invalid_descs, st.Rx_dropped)
	}

	// Send the ARP frame on to B from the buffer it arrived in.
	tx := txring.New(sb)
	got, tidx := tx.Reserve(1)
	if got != 1 {
		t.Fatalf("TX Reserve(1) = %d", got)
	}
	tx.Set(tidx, rx[arp].addr, rx[arp].len, 0)
	frames.Move(rx[arp].addr, umem.Held, umem.KernelTX)
	tx.Submit()
	if tx.InFlight() != 1 {
		t.Errorf("InFlight = %d after one Submit", tx.InFlight())
	}
	var done [4]uint64
	var reaped []uint64
	deadline = time.Now().Add(time.Second)
	for tx.InFlight() > 0 && time.Now().Before(deadline) {
		if k := tx.Reap(done[:]); k > 0 {
			reaped = append(reaped, done[:k]...)
			continue
		}
		if tx.Pending() > 0 {
			tx.Kick(true)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // anything more would be a bug
	reaped = append(reaped, done[:tx.Reap(done[:])]...)
	if len(reaped) != 1 || reaped[0] != rx[arp].addr {
		t.Fatalf("completion ring returned %#x, want exactly [%#x]", reaped, rx[arp].addr)
	}
	cache.Free(reaped[0], umem.KernelTX)
	for i, f := range rx {
		if i != arp {
			cache.Free(f.addr, umem.Held)
		}
	}
	if tx.Kicks.Load() == 0 {
		t.Error("copy-mode TX was never kicked")
	}
	if tx.KickErrors.Load() != 0 {
		t.Errorf("%d kick errors", tx.KickErrors.Load())
	}
	stb, err := sb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s stats: %+v", p.LinkB, stb)
	if stb.Tx_invalid_descs != 0 {
		t.Errorf("%s: %d invalid TX descriptors", p.LinkB, stb.Tx_invalid_descs)
	}
	// The frame arrived in B (B's stack may ignore it: it is A's request).
	deadline = time.Now().Add(time.Second)
	for {
		_, rxB := nsLink(t, p.B, p.PeerB)
		if rxB > rxB0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s in B received nothing (rx_packets %d)", p.PeerB, rxB)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Shared socket first, then the owner; then the program.
	if err := sb.Close(); err != nil {
		t.Errorf("close shared socket: %v", err)
	}
	if err := sa.Close(); err != nil {
		t.Errorf("close owner socket: %v", err)
	}
	if err := sa.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if xdpProgID(t, p.LinkA) == 0 {
		t.Error("no XDP program on the link before Program.Close")
	}
	if err := prog.Close(); err != nil {
		t.Errorf("close program: %v", err)
	}
	if id := xdpProgID(t, p.LinkA); id != 0 {
		t.Errorf("XDP program %d still on %s after Close", id, p.LinkA)
	}
	// The kernel let go of what it still held; nothing else is missing.
	frames.Reclaim(umem.KernelRX)
	cache.Flush()
	if err := r.Check(); err != nil {
		t.Error(err)
	}
	if r.InUse() != 0 {
		t.Errorf("%d units in use after everything came back", r.InUse())
	}
}

func TestOpenZeroCopyOnVeth(t *testing.T) {
	p := newPair(t)
	r := newRegion(t)
	idx := ifindex(t, p.LinkA)
	s, err := xsk.Open(r, xsk.Config{Ifname: p.LinkA, Ifindex: idx, RingSize: testRingSize, ZeroCopy: xsk.ZeroCopyOn})
	if err == nil {
		s.Close()
		t.Fatal("zero-copy bind on veth succeeded")
	}
	if !errors.Is(err, xsk.ErrZeroCopyUnsupported) {
		t.Errorf("error %q does not wrap ErrZeroCopyUnsupported", err)
	}
	if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("error %q does not wrap EOPNOTSUPP", err)
	}
	if !strings.Contains(err.Error(), p.LinkA) {
		t.Errorf("error %q does not name the link", err)
	}
	// The failed attempt released the queue at once: auto now binds, in
	// copy mode.
	s, err = xsk.Open(r, xsk.Config{Ifname: p.LinkA, Ifindex: idx, RingSize: testRingSize, ZeroCopy: xsk.ZeroCopyAuto})
	if err != nil {
		t.Fatalf("ZeroCopyAuto right after the failed zero-copy bind: %v", err)
	}
	if s.BindMode() != "copy" {
		t.Errorf("ZeroCopyAuto on veth: BindMode %q", s.BindMode())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A socket that was bound releases its queue only once the kernel's
	// deferred pool release has run (xp_put_pool schedules it on a
	// workqueue), so an immediate rebind may see EBUSY for a moment.
	start := time.Now()
	var busy int
	for {
		s, err = xsk.Open(r, xsk.Config{Ifname: p.LinkA, Ifindex: idx, RingSize: testRingSize, ZeroCopy: xsk.ZeroCopyOff})
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Since(start) > 2*time.Second {
			break
		}
		busy++
		time.Sleep(time.Millisecond)
	}
	if err != nil {
		t.Fatalf("rebind after Close (%d EBUSY in %v): %v", busy, time.Since(start), err)
	}
	defer s.Close()
	t.Logf("rebind after Close: %d EBUSY answers over %v first", busy, time.Since(start).Round(time.Microsecond))
}

func TestOpenRejectsRingSize(t *testing.T) {
	r := newRegion(t) // Open checks sizes before any syscall: no root needed
	for _, c := range []struct{ ring, fill uint32 }{
		{0, 0}, {1000, 0}, {3, 0}, {2047, 0}, {1000, 2048},
		{1024, 1000}, {1024, 3000},
	} {
		s, err := xsk.Open(r, xsk.Config{Ifname: "lo", Ifindex: 1, RingSize: c.ring, FillSize: c.fill})
		if err == nil {
			s.Close()
			t.Errorf("ring size %d, fill size %d accepted", c.ring, c.fill)
			continue
		}
		if !strings.Contains(err.Error(), "power of two") {
			t.Errorf("ring size %d, fill size %d: error %q does not say why", c.ring, c.fill, err)
		}
	}
}

func TestOpenSharedNeedsDistinctQueue(t *testing.T) {
	p := newPair(t)
	r := newRegion(t)
	sa := open(t, r, p.LinkA, nil)
	// A second socket on the same link and queue is refused, and the
	// failed socket does not disturb the first.
	s, err := xsk.Open(r, xsk.Config{Ifname: p.LinkA, Ifindex: ifindex(t, p.LinkA), RingSize: testRingSize, Shared: sa})
	if err == nil {
		s.Close()
		t.Fatal("second socket on the same queue accepted")
	}
	t.Logf("refused as expected: %v", err)
	sb := open(t, r, p.LinkB, sa)
	if err := sb.Close(); err != nil {
		t.Error(err)
	}
	if err := sa.Close(); err != nil {
		t.Error(err)
	}
}

func TestSecondAttachRefused(t *testing.T) {
	p := newPair(t)
	first := attach(t, p.LinkA)
	id := xdpProgID(t, p.LinkA)
	if id == 0 {
		t.Fatal("no XDP program after Attach")
	}
	for _, force := range []bool{false, true} {
		second, err := xsk.Attach(p.LinkA, ifindex(t, p.LinkA), xsk.AttachConfig{Force: force})
		if err == nil {
			second.Close()
			t.Fatalf("force=%v: second Attach on %s succeeded", force, p.LinkA)
		}
		if !errors.Is(err, xsk.ErrForeignProgram) {
			t.Errorf("force=%v: error %q does not wrap ErrForeignProgram", force, err)
		}
		if !strings.Contains(err.Error(), "another xdpfwd instance") {
			t.Errorf("force=%v: error %q does not mention another xdpfwd instance", force, err)
		}
		if got := xdpProgID(t, p.LinkA); got != id {
			t.Errorf("force=%v: program on the link changed from %d to %d", force, id, got)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if id := xdpProgID(t, p.LinkA); id != 0 {
		t.Fatalf("program %d still attached after Close", id)
	}
	// The link is free again.
	again := attach(t, p.LinkA)
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

// attachForeign attaches a plain XDP_PASS program named "foreign" to link
// through netlink (not a BPF link), in the given mode, as another tool
// would.
func attachForeign(t *testing.T, link string, flags int) uint32 {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "foreign",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close() // the attachment holds its own reference
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, prog.FD(), flags); err != nil {
		t.Fatalf("attach foreign program to %s (flags %#x): %v", link, flags, err)
	}
	t.Cleanup(func() {
		// Deleting the pair's link would detach it too; be explicit.
		if l, err := netlink.LinkByName(link); err == nil {
			netlink.LinkSetXdpFdWithFlags(l, -1, flags)
		}
	})
	return xdpProgID(t, link)
}

func TestAttachForeignProgram(t *testing.T) {
	for _, mode := range []struct {
		name     string
		flags    int
		attached uint32 // nl.XDP_ATTACHED_*
	}{
		{"generic", unix.XDP_FLAGS_SKB_MODE, nl.XDP_ATTACHED_SKB},
		{"native", unix.XDP_FLAGS_DRV_MODE, nl.XDP_ATTACHED_DRV},
	} {
		t.Run(mode.name, func(t *testing.T) {
			p := newPair(t)
			id := attachForeign(t, p.LinkA, mode.flags)
			if id == 0 {
				t.Fatal("foreign program not visible through netlink")
			}
			_, err := xsk.Attach(p.LinkA, ifindex(t, p.LinkA), xsk.AttachConfig{})
			if !errors.Is(err, xsk.ErrForeignProgram) || !strings.Contains(err.Error(), "--force") {
				t.Fatalf("Attach without force: %v, want ErrForeignProgram asking for --force", err)
			}
			if strings.Contains(err.Error(), "xdpfwd instance") {
				t.Errorf("foreign program taken for xdpfwd's: %v", err)
			}
			if got := xdpProgID(t, p.LinkA); got != id {
				t.Fatalf("refused Attach changed the program from %d to %d", id, got)
			}
			for _, commit := range []bool{false, true} {
				prog, err := xsk.Attach(p.LinkA, ifindex(t, p.LinkA), xsk.AttachConfig{Force: true})
				if err != nil {
					t.Fatalf("Attach with force: %v", err)
				}
				if got := xdpProgID(t, p.LinkA); got == id || got == 0 {
					t.Errorf("after forced Attach the link has program %d (foreign was %d)", got, id)
				}
				if commit {
					prog.Commit()
				}
				if err := prog.Close(); err != nil {
					t.Fatalf("Close (commit %v): %v", commit, err)
				}
				got, attached := xdpProgMode(t, p.LinkA)
				switch {
				case !commit && (got != id || attached != mode.attached):
					// Setup abandoned before Commit: the link is as it was.
					t.Fatalf("Close before Commit left program %d (attach mode %d), want the foreign %d back in mode %d", got, attached, id, mode.attached)
				case commit && got != 0:
					t.Fatalf("Close after Commit left program %d, want none", got)
				}
			}
		})
	}
}

// checkGone reports any link or namespace of p still present after Close.
func checkGone(tb testing.TB, p *topo.Pair) {
	for _, name := range []string{p.LinkA, p.LinkB} {
		if _, err := netlink.LinkByName(name); !errors.As(err, new(netlink.LinkNotFoundError)) {
			tb.Errorf("link %s still present after the pair was closed (%v)", name, err)
		}
	}
	for _, ns := range []*topo.NS{p.A, p.B} {
		if _, err := os.Stat("/run/netns/" + ns.Name); !errors.Is(err, os.ErrNotExist) {
			tb.Errorf("namespace %s still present after the pair was closed (%v)", ns.Name, err)
		}
	}
}

// TestOpenBusyPoll checks that Config.BusyPoll leaves the busy-poll options
// on the socket, and that a socket without it has none. (The kernel has no
// getsockopt for SO_BUSY_POLL_BUDGET; Open fails if setting it fails.)
func TestOpenBusyPoll(t *testing.T) {
	p := newPair(t)
	r := newRegion(t)
	idx := ifindex(t, p.LinkA)
	for _, c := range []struct {
		name          string
		busyPoll      time.Duration
		budget        int
		prefer, usecs int
	}{
		{"off: the net.core.busy_read default", 0, 0, 0, busyRead(t)},
		{"20us budget 64", 20 * time.Microsecond, 64, 1, 20},
		{"sub-µs rounds up to 1", 100 * time.Nanosecond, 0, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s *xsk.Socket
			var err error
			// The previous subtest's queue is released by a deferred
			// kernel work item: retry EBUSY briefly.
			for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
				s, err = xsk.Open(r, xsk.Config{Ifname: p.LinkA, Ifindex: idx, RingSize: testRingSize,
					BusyPoll: c.busyPoll, BusyPollBudget: c.budget})
				if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, o := range []struct {
				name      string
				opt, want int
			}{
				{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, c.prefer},
				{"SO_BUSY_POLL", unix.SO_BUSY_POLL, c.usecs},
			} {
				got, err := unix.GetsockoptInt(s.FD(), unix.SOL_SOCKET, o.opt)
				if err != nil {
					t.Fatalf("%s: %v", o.name, err)
				}
				if got != o.want {
					t.Errorf("%s = %d, want %d", o.name, got, o.want)
				}
			}
		})
	}
}

// busyRead is net.core.busy_read, every socket's default SO_BUSY_POLL.
func busyRead(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/core/busy_read")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAdopt: a process takes over another's program, socket and UMEM
// from their file descriptors (here duplicates, in the same process): the
// frames the kernel delivered before sit on the adopted socket's RX ring
// in the adopted UMEM; the predecessor closes all of its own, and the
// program stays attached and goes on redirecting into the same socket,
// whose next frames arrive in the frames the predecessor lent; the
// successor's Close detaches it.
func TestAdopt(t *testing.T) {
	p := newPair(t)
	cfg := umem.Config{FrameSize: 2048, Frames: 4096, InlineSlots: 256, HugePages: umem.HugePagesAuto}
	rs, err := umem.NewSpace(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	prog, err := xsk.Attach(p.LinkA, ifindex(t, p.LinkA), xsk.AttachConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := xsk.Open(r, xsk.Config{Ifname: p.LinkA, Ifindex: ifindex(t, p.LinkA), RingSize: testRingSize})
	if err != nil {
		t.Fatal(err)
	}
	cache := r.Frames.NewCache(r.Frames.Len())
	n, idx := sa.Fill.Reserve(sa.Fill.Size())
	for k := range n {
		a, _ := cache.Alloc(umem.KernelRX)
		sa.Fill.SetAddr(idx+k, a)
	}
	sa.Fill.Submit(n)
	cache.Flush()
	if err := prog.Register(0, sa); err != nil {
		t.Fatal(err)
	}
	// waitRX waits until s's RX ring holds more than have descriptors.
	waitRX := func(s *xsk.Socket, have uint32) uint32 {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); ; {
			go topo.Ping(p.A, p.V4B, 1, 50*time.Millisecond)
			if n := uint32(len(s.RX.Unread(nil, true))); n > have {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no frame on the RX ring for 3 s", s.Ifname())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := waitRX(sa, 0)
	t.Logf("predecessor: %d on the RX ring", before)
	id := xdpProgID(t, p.LinkA)

	dup := func(fd int) int {
		t.Helper()
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	pf := prog.Files()
	files := xsk.ProgramFiles{Link: dup(pf.Link), XSKs: dup(pf.XSKs), Passed: dup(pf.Passed), Stamps: dup(pf.Stamps)}
	memfd := os.NewFile(uintptr(dup(int(r.File().Fd()))), "umem")
	sockFD := dup(sa.FD())
	states := r.Frames.States()
	// The predecessor lets go of everything it holds.
	if err := errors.Join(prog.Close(), sa.Close(), r.Close()); err != nil {
		t.Fatal(err)
	}
	if got := xdpProgID(t, p.LinkA); got != id {
		t.Fatalf("program %d on %s after the predecessor closed its own, want %d still", got, p.LinkA, id)
	}
	rs2, err := umem.MapSpace(memfd, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r2 := rs2[0]
	defer r2.Close()
	if err := r2.Frames.Restore(states); err != nil {
		t.Fatal(err)
	}
	p2, err := xsk.AdoptProgram(p.LinkA, ifindex(t, p.LinkA), 1, prog.Mode(), false, files)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := xsk.Adopt(r2, sockFD, xsk.Config{Ifname: p.LinkA, Ifindex: ifindex(t, p.LinkA), RingSize: testRingSize})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := uint32(len(s2.RX.Unread(nil, true))); got < before {
		t.Errorf("adopted RX ring holds %d descriptors, the predecessor left %d", got, before)
	}
	after := waitRX(s2, uint32(len(s2.RX.Unread(nil, true))))
	k, i := s2.RX.Peek(after)
	for j := range k {
		d := s2.RX.Desc(i + j)
		a := xsk.Flat(d.Addr)
		if !r2.Frames.Contains(a) || r2.Frames.StateOf(a) != umem.KernelRX {
			t.Fatalf("RX %d: %#x, %v: not a frame the predecessor lent", j, a, r2.Frames.StateOf(a))
		}
		if src := net.HardwareAddr(r2.Mem()[a+6 : a+12]); src.String() == "00:00:00:00:00:00" {
			t.Errorf("RX %d: an empty frame", j)
		}
	}
	s2.RX.Release(k)
	if n, err := p2.Passed(); err != nil {
		t.Errorf("adopted passed counter: %d, %v", n, err)
	}
	t.Logf("%d descriptors left by the predecessor, %d after the handover; program %d kept", before, after, id)
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := xdpProgID(t, p.LinkA); got != 0 {
		t.Errorf("program %d on %s after the successor closed it", got, p.LinkA)
	}
}
