package inline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
)

const testEtherType = 0x88b5 // IEEE 802 local experimental

// testFrame is a broadcast Ethernet frame of size bytes carrying seq.
func testFrame(size int, seq uint32) []byte {
	f := make([]byte, size)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], []byte{0x02, 0x58, 0x44, 0x50, 0x00, 0x01})
	binary.BigEndian.PutUint16(f[12:14], testEtherType)
	if size >= 18 {
		binary.BigEndian.PutUint32(f[14:18], seq)
	}
	for i := 18; i < size; i++ {
		f[i] = byte(int(seq)*7 + i)
	}
	return f
}

type senderEnv struct {
	pair    *topo.Pair
	ifindex int
	capFD   int // AF_PACKET socket on the peer, in namespace A
}

// newSenderEnv builds a namespace pair and a capture socket on LinkA's
// peer for the test's ethertype.
func newSenderEnv(t *testing.T, queues int) *senderEnv {
	t.Helper()
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{Queues: queues})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	l, err := netlink.LinkByName(p.LinkA)
	if err != nil {
		t.Fatal(err)
	}
	e := &senderEnv{pair: p, ifindex: l.Attrs().Index, capFD: -1}
	err = p.A.Do(func() error {
		l, err := netlink.LinkByName(p.PeerA)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
			unix.Close(fd)
			return err
		}
		proto := uint16(testEtherType)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto<<8 | proto>>8, Ifindex: l.Attrs().Index}); err != nil {
			unix.Close(fd)
			return err
		}
		e.capFD = fd
		return nil
	})
	if err != nil {
		t.Fatalf("capture socket in %s: %v", p.A.Name, err)
	}
	t.Cleanup(func() { unix.Close(e.capFD) })
	return e
}

// capture reads what arrived on the peer until want frames or the
// timeout, and returns them.
func (e *senderEnv) capture(want int, timeout time.Duration) [][]byte {
	var got [][]byte
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(e.capFD, buf, 0)
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		got = append(got, bytes.Clone(buf[:n]))
	}
	return got
}

func newSender(t *testing.T, cfg SenderConfig) *Sender {
	t.Helper()
	s, err := NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// send queues pkt, waiting for completions while the sender is full.
func send(t *testing.T, s *Sender, pkt []byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, err := s.Send(pkt)
		if err != nil {
			t.Fatalf("Send(%d bytes): %v", len(pkt), err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Send(%d bytes) still refused after 5s", len(pkt))
		}
		if err := s.Wait(time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSender(t *testing.T) {
	e := newSenderEnv(t, 1)
	s := newSender(t, SenderConfig{Ifname: e.pair.LinkA, Ifindex: e.ifindex, HugePages: umem.HugePagesOff})
	region := s.Region()
	l0, err := netlink.LinkByName(e.pair.LinkA)
	if err != nil {
		t.Fatal(err)
	}

	sizes := []int{60, 256, 257, 1400, 1514}
	const count = 1000
	var wantBytes uint64
	var wantPaths [linearize.NumPaths]uint64
	for i := range count {
		size := sizes[i%len(sizes)]
		send(t, s, testFrame(size, uint32(i)))
		wantBytes += uint64(size)
		if size <= umem.InlineSlotSize {
			wantPaths[linearize.Inline]++
		} else {
			wantPaths[linearize.Frag]++
		}
	}
	if err := s.Wait(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if s.Sent != count || s.Bytes != wantBytes || s.Descs != count {
		t.Errorf("Sent %d, Bytes %d, Descs %d; want %d, %d, %d", s.Sent, s.Bytes, s.Descs, count, wantBytes, count)
	}
	if s.Paths != wantPaths {
		t.Errorf("Paths %v, want %v (inline %d, frag %d)", s.Paths, wantPaths, wantPaths[linearize.Inline], wantPaths[linearize.Frag])
	}
	st, err := s.Socket().Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Tx_invalid_descs != 0 {
		t.Errorf("socket stats %+v: %d invalid TX descriptors", st, st.Tx_invalid_descs)
	}
	t.Logf("bind mode %s, socket stats %+v", s.Socket().BindMode(), st)

	// What the peer received is byte for byte what was sent.
	got := e.capture(count, 3*time.Second)
	seen := make([]bool, count)
	for _, f := range got {
		if len(f) < 18 {
			t.Fatalf("captured a %d-byte frame", len(f))
		}
		seq := binary.BigEndian.Uint32(f[14:18])
		if seq >= count || seen[seq] {
			t.Fatalf("captured frame with sequence %d twice or out of range", seq)
		}
		seen[seq] = true
		if want := testFrame(sizes[seq%uint32(len(sizes))], seq); !bytes.Equal(f, want) {
			t.Fatalf("frame %d: captured %d bytes differ from the %d sent", seq, len(f), len(want))
		}
	}
	l1, err := netlink.LinkByName(e.pair.LinkA)
	if err != nil {
		t.Fatal(err)
	}
	txp := l1.Attrs().Statistics.TxPackets - l0.Attrs().Statistics.TxPackets
	t.Logf("peer captured %d of %d frames, all exact; %s tx_packets +%d", len(got), count, e.pair.LinkA, txp)
	if txp < count {
		t.Errorf("%s transmitted %d packets, want %d", e.pair.LinkA, txp, count)
	}
	if len(got) == 0 {
		t.Error("the peer received none of the frames")
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Region() is nil once closed; the accounting outlives the mapping.
	if err := region.Check(); err != nil {
		t.Fatal(err)
	}
	if n := region.InUse(); n != 0 {
		t.Fatalf("%d units in use after Wait and Close", n)
	}
}

func TestSenderTooLong(t *testing.T) {
	e := newSenderEnv(t, 1)
	s := newSender(t, SenderConfig{Ifname: e.pair.LinkA, Ifindex: e.ifindex, HugePages: umem.HugePagesOff})
	for _, size := range []int{5000, 9000} {
		ok, err := s.Send(testFrame(size, 0))
		if ok || !errors.Is(err, ErrTooLong) {
			t.Errorf("Send(%d bytes) without MultiBuffer = %v, %v; want ErrTooLong", size, ok, err)
		}
	}
	// A full chunk still fits one descriptor.
	ok, err := s.Send(testFrame(4096, 1))
	if !ok || err != nil {
		t.Errorf("Send(4096 bytes) = %v, %v", ok, err)
	}
	if err := s.Wait(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if s.Sent != 1 || s.Paths[linearize.Frag] != 1 {
		t.Errorf("Sent %d, Paths %v after one packet", s.Sent, s.Paths)
	}
	region := s.Region()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := region.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestSenderMultiBuffer(t *testing.T) {
	e := newSenderEnv(t, 1)
	s, err := NewSender(SenderConfig{Ifname: e.pair.LinkA, Ifindex: e.ifindex, HugePages: umem.HugePagesOff, MultiBuffer: true})
	if err != nil {
		t.Skipf("multi-buffer sender: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	// 9000 bytes leave as 3 chained descriptors; the 1500-MTU peer drops
	// them, but the kernel must accept and complete them.
	for i := range 10 {
		send(t, s, testFrame(9000, uint32(i)))
	}
	if err := s.Wait(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := s.Socket().Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Sent != 10 || s.Descs != 30 || st.Tx_invalid_descs != 0 {
		t.Errorf("Sent %d, Descs %d, stats %+v", s.Sent, s.Descs, st)
	}
	if _, err := s.Send(testFrame(linearize.MaxDescs*4096+1, 0)); !errors.Is(err, ErrTooLong) {
		t.Errorf("Send of more than %d chunks: %v, want ErrTooLong", linearize.MaxDescs, err)
	}
	region := s.Region()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := region.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestSenderLongerThanABlock: with MultiBuffer, a packet of at most
// MaxDescs chunks passes Send's length check even when it cannot fit in a
// frag block, so Send returns (false, nil), "full, retry", forever.
func TestSenderLongerThanABlock(t *testing.T) {
	e := newSenderEnv(t, 3)
	for i, tc := range []struct {
		order, size int
	}{
		{3, 40000},                     // 10 chunks, 32 KiB blocks
		{4, linearize.MaxDescs * 4096}, // 18 chunks, 64 KiB blocks
		{4, umem.ChunkMax<<4 + 1},      // one byte over a 64 KiB block
	} {
		// A queue each: the kernel releases a closed socket's queue binding
		// asynchronously, so rebinding the same queue at once is EBUSY.
		s := newSender(t, SenderConfig{Ifname: e.pair.LinkA, Ifindex: e.ifindex, Queue: i, HugePages: umem.HugePagesOff, MultiBuffer: true, FragOrder: tc.order})
		ok, err := s.Send(testFrame(tc.size, 0))
		if ok || !errors.Is(err, ErrTooLong) {
			t.Errorf("frag order %d: Send(%d bytes) = %v, %v; want ErrTooLong (it can never fit)", tc.order, tc.size, ok, err)
		}
		s.Close()
	}
}

// TestSenderEmptyPacket: an empty packet is queued as a zero-length
// descriptor, which the kernel rejects (tx_invalid_descs), while Send
// reports success and counts it as sent.
func TestSenderEmptyPacket(t *testing.T) {
	e := newSenderEnv(t, 1)
	s := newSender(t, SenderConfig{Ifname: e.pair.LinkA, Ifindex: e.ifindex, HugePages: umem.HugePagesOff})
	ok, err := s.Send(nil)
	if werr := s.Wait(2 * time.Second); werr != nil {
		t.Fatal(werr)
	}
	st, serr := s.Socket().Stats()
	if serr != nil {
		t.Fatal(serr)
	}
	if ok || err == nil || st.Tx_invalid_descs != 0 || s.Sent != 0 {
		t.Errorf("Send(empty) = %v, %v; Sent %d; tx_invalid_descs %d: want an error and nothing queued", ok, err, s.Sent, st.Tx_invalid_descs)
	}
}

// TestSenderInlineMax: SenderConfig.InlineMax takes the settings
// fwd.Config.InlineMax does: 0 is the default (256), Off sends nothing
// inline and maps no inline zone, anything else out of range is refused.
func TestSenderInlineMax(t *testing.T) {
	e := newSenderEnv(t, 1)
	for _, tc := range []struct {
		setting, want int
		zone          bool
	}{
		{0, umem.InlineSlotSize, true},
		{100, 100, true},
		{Off, 0, false},
	} {
		// One at a time on queue 0: closed here, not at cleanup.
		s, err := NewSender(SenderConfig{Ifname: e.pair.LinkA, Ifindex: e.ifindex, HugePages: umem.HugePagesOff, InlineMax: tc.setting})
		if err != nil {
			t.Fatalf("InlineMax %d: %v", tc.setting, err)
		}
		if got, zone := s.b.Policy.InlineMax, s.Region().Inline.Len() > 0; got != tc.want || zone != tc.zone {
			t.Errorf("InlineMax %d: limit %d, inline zone %v; want %d, %v", tc.setting, got, zone, tc.want, tc.zone)
		}
		s.Close()
	}
	for _, bad := range []int{-2, umem.InlineSlotSize + 1} {
		if s, err := NewSender(SenderConfig{Ifname: e.pair.LinkA, Ifindex: e.ifindex, InlineMax: bad}); err == nil {
			s.Close()
			t.Errorf("InlineMax %d accepted", bad)
		}
	}
}
