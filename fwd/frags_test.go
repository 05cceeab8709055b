package fwd_test

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestTooManyFrags: a packet that arrives as more descriptors than any TX
// ring takes (18) is dropped whole and counted. On the code this test was
// written against, the chain was cut at 18: the head left as a truncated
// packet and the remaining descriptors were read as a packet of their own,
// whose "Ethernet header" was payload chosen by the sender — a frame
// smuggled past any L2 filter. Here the MTU is raised under a running
// forwarder (frame size 2048, multi-buffer) until a frame takes 23 frames.
func TestTooManyFrags(t *testing.T) {
	p := newPair(t, topo.Options{MTU: 9000, TxChecksum: true})
	r := start(t, p, fwd.Config{MultiBufferMode: fwd.MultiBufferOn, FrameSize: 2048})
	requirePing(t, "at MTU 9000", p.A, p.V4B, 3)
	const mtu = 40000
	if err := p.SetMTU(mtu); err != nil {
		t.Fatalf("raise the MTU to %d: %v", mtu, err)
	}
	srcMAC, dstMAC := macOf(t, p.A, p.PeerA), macOf(t, p.B, p.PeerB)
	// The tail, from the 19th frame on, is a well-formed UDP frame to B:
	// what would cross on its own if the chain were cut.
	// The frame itself is of a local experimental EtherType, which B's
	// stack drops: only a smuggled tail could reach B's UDP socket.
	big := make([]byte, mtu+14)
	copy(big, dstMAC)
	copy(big[6:], srcMAC)
	big[12], big[13] = 0x88, 0xb5
	inner := topo.UDPFrame(dstMAC, srcMAC, p.V4A, p.V4B, 5556, 9011, 100)
	for off := 18 * (2048 - 256); off+len(inner) < len(big); off += 2048 - 256 {
		copy(big[off:], inner)
	}
	// What the smuggled tail would deliver in B, if it crossed.
	var sink *net.UDPConn
	if err := p.B.Do(func() (err error) {
		sink, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.V4B.AsSlice(), Port: 9011})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	before := [2]fwd.LinkStats{r.f.LinkStats(0), r.f.LinkStats(1)}
	if err := p.A.Do(func() error {
		fd, ifi, err := hostileSocket(p.PeerA, false)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, big, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6})
	}); err != nil {
		t.Fatalf("send a %d-byte frame: %v", len(big), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var after [2]fwd.LinkStats
	for {
		after = [2]fwd.LinkStats{r.f.LinkStats(0), r.f.LinkStats(1)}
		if after[0].RXPackets > before[0].RXPackets || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitSettled(t, r.f, true, 5*time.Second)
	after = [2]fwd.LinkStats{r.f.LinkStats(0), r.f.LinkStats(1)}
	got := dropDelta(before[0], after[0])[fwd.DropRXTooLong]
	rx, sent := after[0].RXPackets-before[0].RXPackets, after[1].TXPackets-before[1].TXPackets
	t.Logf("one %d-byte frame: %d packets received on %s, %d sent on %s, rx_too_many_frags +%d",
		len(big), rx, p.LinkA, sent, p.LinkB, got)
	if got != 1 {
		t.Errorf("rx_too_many_frags grew by %d, want 1", got)
	}
	// Other traffic (an ARP exchange) may cross meanwhile; nothing of the
	// long frame may.
	if sent+1 > rx {
		t.Errorf("%d packets received, %d sent: part of a frame of more than 18 frames left %s", rx, sent, p.LinkB)
	}
	sink.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, from, err := sink.ReadFromUDP(make([]byte, 256)); err == nil {
		t.Errorf("B received a %d-byte datagram from %v: the tail of the long frame was forwarded as a packet of its own", n, from)
	}
	if err := p.SetMTU(9000); err != nil {
		t.Fatal(err)
	}
	requirePing(t, "after the drop", p.A, p.V4B, 3)
	r.stop(t)
}
