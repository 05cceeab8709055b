package fwd

import (
	"net"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/linearize"
)

// TestLostRXFrameIsLeaked: a frame a worker took off an RX ring and then
// lost (neither sent nor recycled) shows up as leaked at Close. On the
// code this test was written against, RX frames never left the KernelRX
// state while a worker had them, and Close reclaimed every KernelRX unit,
// so such a loss was recovered silently.
func TestLostRXFrameIsLeaked(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := New(Config{Links: []string{p.LinkA, p.LinkB}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Anything A sends (its ARP request first) lands in the RX ring of
	// link A; no worker runs to take it.
	if err := p.A.Do(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.V4B.AsSlice(), Port: 9})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("lost"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	w, port := f.workers[0], f.ports[0][0]
	deadline := time.Now().Add(5 * time.Second)
	for port.rx.Empty() {
		if time.Now().After(deadline) {
			t.Fatal("nothing reached link A's RX ring")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A worker that reads one packet and forgets it.
	n := port.rx.Peek(1, linearize.MaxDescs)
	var b rxBatch
	var pkt rxPkt
	if !w.collect(port, w.rx.chain, &b, &pkt) {
		t.Fatalf("collect refused the packet: %+v", b)
	}
	port.rx.Release()
	f.Close()
	if got := f.Leaked(); got != int(n) {
		t.Errorf("Leaked() = %d after a worker lost %d received frame(s)", got, n)
	}
}
