package txring_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

const (
	frameLen = 64
	// etherTypeTest is IEEE 802 "local experimental" 1: nothing in the
	// namespace handles it, so the receiving stack drops each frame at
	// once.
	etherTypeTest = 0x88B5
)

// env is an owner socket on a pair's LinkA whose TX ring sends into
// namespace A, with every inline slot holding a ready 64-byte frame.
type env struct {
	p     *topo.Pair
	r     *umem.Region
	s     *xsk.Socket
	slots []uint64 // inline slot addresses, each holding one frame
}

func newEnv(tb testing.TB, ringSize uint32) *env {
	tb.Helper()
	topo.RequireRoot(tb)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	// Registered first, so it runs last: after the pair is closed.
	tb.Cleanup(func() { checkGone(tb, p) })
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("close pair %s: %v", p.Name, err)
		}
	})
	r, err := umem.New(umem.Config{FrameSize: 2048, Frames: 4096, InlineSlots: 256, HugePages: umem.HugePagesAuto})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() }) // after the socket's cleanup
	l, err := netlink.LinkByName(p.LinkA)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := xsk.Open(r, xsk.Config{Ifname: p.LinkA, Ifindex: l.Attrs().Index, RingSize: ringSize})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })

	e := &env{p: p, r: r, s: s}
	dst, _ := e.peerA(tb)
	mem := r.Mem()
	for i := range r.Inline.Len() {
		a := r.Inline.Base() + uint64(i)*umem.InlineSlotSize
		f := mem[a : a+frameLen]
		copy(f[0:6], dst)
		copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0x01})
		binary.BigEndian.PutUint16(f[12:14], etherTypeTest)
		binary.BigEndian.PutUint64(f[14:22], uint64(i))
		e.slots = append(e.slots, a)
	}
	return e
}

// peerA returns the MAC address and RX packet count of eth0 in A.
func (e *env) peerA(tb testing.TB) (net.HardwareAddr, uint64) {
	tb.Helper()
	var mac net.HardwareAddr
	var rx uint64
	err := e.p.A.Do(func() error {
		l, err := netlink.LinkByName(e.p.PeerA)
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
		tb.Fatalf("look up %s in %s: %v", e.p.PeerA, e.p.A.Name, err)
	}
	return mac, rx
}

// TestInFlightKicksAndReap sends rounds of frames, some with reservations
// cancelled, and checks the accounting: InFlight rises by what Submit
// publishes and falls to 0 once Reap has everything; each Submit on a
// copy-mode socket (whose TX ring always asks for a wakeup) kicks once;
// every submitted address comes back exactly once.
func TestInFlightKicksAndReap(t *testing.T) {
	const ringSize = 128
	e := newEnv(t, ringSize)
	tx := txring.New(e.s)
	if tx.Socket() != e.s {
		t.Fatal("Socket() is not the socket the ring was made from")
	}
	if got := tx.Free(1); got != ringSize {
		t.Fatalf("fresh ring: Free = %d, want %d", got, ringSize)
	}
	if !e.s.TX.NeedsWakeup() {
		t.Fatal("copy-mode TX ring does not ask for a wakeup")
	}
	_, rx0 := e.peerA(t)

	free := append([]uint64(nil), e.slots...)
	out := map[uint64]bool{}
	var sent, total, kicks uint64
	reaped := make([]uint64, 32) // smaller than a batch: Reap is called repeatedly
	rng := rand.New(rand.NewPCG(1, 2))

	reapAll := func(round int) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for tx.InFlight() > 0 {
			n := tx.Reap(reaped)
			for _, a := range reaped[:n] {
				if !out[a] {
					t.Fatalf("round %d: completion of %#x, which is not in flight", round, a)
				}
				delete(out, a)
				free = append(free, a)
			}
			if got, want := tx.InFlight(), uint64(len(out)); got != want {
				t.Fatalf("round %d: InFlight = %d with %d addresses outstanding", round, got, want)
			}
			if n > 0 {
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d frames not completed within 2 s (pending %d)", round, tx.InFlight(), tx.Pending())
			}
			if tx.Pending() > 0 {
				tx.Kick(true)
				kicks++
			}
			time.Sleep(100 * time.Microsecond)
		}
		if len(out) != 0 {
			t.Fatalf("round %d: InFlight 0 with %d addresses outstanding", round, len(out))
		}
		if n := tx.Reap(reaped); n != 0 {
			t.Fatalf("round %d: %d completions after everything came back", round, n)
		}
	}

	// 40 rounds move the indices around the 128-entry ring many times.
	for round := range 40 {
		want := uint32(1 + rng.IntN(96))
		got, idx := tx.Reserve(want)
		if got != want {
			t.Fatalf("round %d: Reserve(%d) = %d on an idle ring", round, want, got)
		}
		keep := got
		if round%3 == 1 {
			keep = uint32(rng.IntN(int(got) + 1))
		}
		for k := range keep {
			a := free[len(free)-1]
			free = free[:len(free)-1]
			tx.Set(idx+k, a, frameLen, 0)
			out[a] = true
		}
		tx.Cancel(got - keep)
		if tx.InFlight() != sent {
			t.Fatalf("round %d: InFlight = %d before Submit, want %d", round, tx.InFlight(), sent)
		}
		tx.Submit()
		if keep > 0 {
			sent += uint64(keep)
			total += uint64(keep)
			kicks++
		}
		if tx.InFlight() != sent {
			t.Fatalf("round %d: InFlight = %d after submitting %d, want %d", round, tx.InFlight(), keep, sent)
		}
		if got := tx.Kicks.Load(); got != kicks {
			t.Fatalf("round %d: Kicks = %d, want %d", round, got, kicks)
		}
		// Sometimes let two rounds pile up before reaping.
		if round%4 != 2 {
			reapAll(round)
			sent = 0
		}
	}
	reapAll(40)

	// A forced kick on an idle ring is still one sendto; an empty Submit
	// makes none.
	before := tx.Kicks.Load()
	tx.Submit()
	tx.Kick(true)
	if got := tx.Kicks.Load(); got != before+1 {
		t.Errorf("Kicks went from %d to %d after an empty Submit and one forced Kick", before, got)
	}
	if n := tx.KickErrors.Load(); n != 0 {
		t.Errorf("%d kick errors", n)
	}
	if len(free) != len(e.slots) {
		t.Errorf("%d of %d slots came back", len(free), len(e.slots))
	}
	st, err := e.s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Tx_invalid_descs != 0 {
		t.Errorf("%d invalid TX descriptors", st.Tx_invalid_descs)
	}
	_, rx1 := e.peerA(t)
	t.Logf("%d frames sent, kicks %d, stats %+v, %s in A received %d packets", total, tx.Kicks.Load(), st, e.p.PeerA, rx1-rx0)
	if rx1-rx0 < total {
		t.Errorf("%s in A received %d packets of the %d sent", e.p.PeerA, rx1-rx0, total)
	}
}

// TestPublishLeavesTheKick fills the TX ring with Publish: the ring is Full,
// every descriptor pending, and no sendto made (the kick is the owner's,
// fwd's lane); one Flush then sends them all and frees the ring.
func TestPublishLeavesTheKick(t *testing.T) {
	const ringSize = 64
	e := newEnv(t, ringSize)
	tx := txring.New(e.s)
	for filled := uint32(0); filled < ringSize; {
		got, idx := tx.Reserve(16)
		for k := range got {
			tx.Set(idx+k, e.slots[filled+k], frameLen, 0)
		}
		filled += got
		tx.Publish()
		if full := filled == ringSize; tx.Full() != full {
			t.Fatalf("%d of %d published: Full = %v", filled, ringSize, tx.Full())
		}
	}
	if n, p := tx.Kicks.Load(), tx.Pending(); n != 0 || p != ringSize || !tx.Owed() {
		t.Fatalf("full ring: %d kicks, %d pending, owed %v; want 0, %d, true", n, p, tx.Owed(), ringSize)
	}
	if err := tx.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	reaped := make([]uint64, ringSize)
	deadline := time.Now().Add(2 * time.Second)
	for n := 0; n < ringSize; n += tx.Reap(reaped) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completed within 2 s after the flush (pending %d)", n, ringSize, tx.Pending())
		}
		time.Sleep(100 * time.Microsecond)
	}
	if tx.Full() || tx.Kicks.Load() == 0 {
		t.Errorf("after the flush: Full %v, %d kicks", tx.Full(), tx.Kicks.Load())
	}
}

// BenchmarkReserveSetSubmitReap transmits batches of 64 frames of 64 bytes
// out of LinkA into namespace A and reaps completions each iteration.
// ns/op is per batch of 64.
func BenchmarkReserveSetSubmitReap(b *testing.B) {
	const batch = 64
	e := newEnv(b, 512)
	tx := txring.New(e.s)
	free := make([]uint64, 0, len(e.slots))
	free = append(free, e.slots...)
	reaped := make([]uint64, len(e.slots))

	reap := func() {
		n := tx.Reap(reaped)
		free = append(free, reaped[:n]...)
	}
	var waits int
	b.ReportAllocs()
	for b.Loop() {
		reap()
		for spins := 0; len(free) < batch; spins++ {
			// The kernel has not completed enough yet.
			if spins > 1_000_000 {
				b.Fatalf("only %d slots free, %d in flight, %d pending", len(free), tx.InFlight(), tx.Pending())
			}
			waits++
			if tx.Pending() > 0 {
				tx.Kick(true)
			}
			reap()
		}
		got, idx := tx.Reserve(batch)
		for k := range got {
			tx.Set(idx+k, free[len(free)-1-int(k)], frameLen, 0)
		}
		free = free[:len(free)-int(got)]
		tx.Submit()
	}
	b.StopTimer()
	ns := float64(b.Elapsed().Nanoseconds())
	b.ReportMetric(ns/float64(b.N*batch), "ns/frame")
	b.ReportMetric(float64(waits)/float64(b.N), "waits/op")

	// Everything comes back.
	deadline := time.Now().Add(2 * time.Second)
	for tx.InFlight() > 0 && time.Now().Before(deadline) {
		if tx.Pending() > 0 {
			tx.Kick(true)
		}
		reap()
		time.Sleep(100 * time.Microsecond)
	}
	if tx.InFlight() != 0 || len(free) != len(e.slots) {
		b.Fatalf("after the run: %d in flight, %d of %d slots free", tx.InFlight(), len(free), len(e.slots))
	}
	if n := tx.KickErrors.Load(); n != 0 {
		b.Errorf("%d kick errors", n)
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

// TestPublishPollTransmits: Publish leaves the kick owed without a
// sendto; a poll(2) of the copy-mode socket transmits what was published,
// up to PollBudget frames per call, as a kick would (xsk_poll drives TX
// while the ring asks for a wake-up); Polled then clears the debt, and
// Flush makes the one sendto a debt calls for.
func TestPublishPollTransmits(t *testing.T) {
	for _, n := range []uint32{1, txring.PollBudget, 2 * txring.PollBudget} {
		t.Run(fmt.Sprintf("%d frames", n), func(t *testing.T) {
			e := newEnv(t, 128)
			tx := txring.New(e.s)
			_, rx0 := e.peerA(t)
			_, idx := tx.Reserve(n)
			for k := range n {
				tx.Set(idx+k, e.slots[k], frameLen, 0)
			}
			tx.Publish()
			if !tx.Owed() || tx.Kicks.Load() != 0 || tx.Pending() != n {
				t.Fatalf("after Publish: owed %v, kicks %d, pending %d; want owed, no kick, %d pending", tx.Owed(), tx.Kicks.Load(), tx.Pending(), n)
			}
			fds := []unix.PollFd{{Fd: int32(e.s.FD()), Events: unix.POLLIN}}
			ts := unix.NsecToTimespec(int64(time.Millisecond))
			// The Go runtime's preemption signal may interrupt it
			// (EINTR) before it polled the socket: poll again.
			var err error = unix.EINTR
			for err == unix.EINTR {
				_, err = unix.Ppoll(fds, &ts, nil)
			}
			if err != nil {
				t.Fatalf("ppoll: %v", err)
			}
			tx.Polled()
			// One poll runs xsk_poll at least once: at least the budget
			// (or everything) leaves without a sendto.
			if sent := n - tx.Pending(); sent < min(n, txring.PollBudget) {
				t.Fatalf("a poll transmitted %d of %d published frames, want at least %d", sent, n, min(n, txring.PollBudget))
			}
			if tx.Owed() || tx.Kicks.Load() != 0 {
				t.Fatalf("after the poll: owed %v, kicks %d; want neither", tx.Owed(), tx.Kicks.Load())
			}
			if err := tx.Flush(); err != nil || tx.Kicks.Load() != 0 {
				t.Fatalf("Flush with nothing owed: %v, kicks %d; want no sendto", err, tx.Kicks.Load())
			}
			for tx.Pending() > 0 {
				tx.Kick(true)
			}
			deadline := time.Now().Add(2 * time.Second)
			for _, rx := e.peerA(t); rx-rx0 < uint64(n); _, rx = e.peerA(t) {
				if time.Now().After(deadline) {
					t.Fatalf("namespace A received %d of %d frames", rx-rx0, n)
				}
				time.Sleep(time.Millisecond)
			}

			_, idx = tx.Reserve(1)
			tx.Set(idx, e.slots[n], frameLen, 0)
			tx.Publish()
			kicks := tx.Kicks.Load()
			if err := tx.Flush(); err != nil || tx.Kicks.Load() != kicks+1 || tx.Owed() {
				t.Fatalf("Flush of one owed frame: %v, kicks %d → %d, owed %v; want one sendto", err, kicks, tx.Kicks.Load(), tx.Owed())
			}
		})
	}
}
