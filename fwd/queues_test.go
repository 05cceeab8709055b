package fwd_test

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestEveryRXQueueServed: links with more RX queues than workers, as a NIC
// with more channels than CPUs has. 64 UDP flows spread over the four
// queues of each veth; two workers must serve all of them. On the code
// this test was written against, xdpfwd opened sockets on queues 0–1 only
// and the XDP program passed what arrived on 2–3 to the kernel, uncounted:
// about 1,900 of 3,200 datagrams arrived.
func TestEveryRXQueueServed(t *testing.T) {
	const flows, per = 64, 50
	p := newPair(t, topo.Options{Queues: 4, TxChecksum: true})
	for _, l := range []string{p.LinkA, p.LinkB} {
		if c, err := ethtool.GetChannels(l); err != nil || c.RX+c.Combined != 4 {
			t.Fatalf("%s: channels %+v (%v), want 4 RX queues", l, c, err)
		}
	}
	r := start(t, p, fwd.Config{Queues: 2})
	got := udpFlows(t, p, flows, per, 100*time.Microsecond)
	var perQueue []uint64
	for q := range 4 {
		perQueue = append(perQueue, r.f.QueueStats(0, q).RXPackets)
	}
	s := r.stop(t)
	a := s.Links[p.LinkA]
	t.Logf("delivered %d of %d; link A: rx %d, queues %d, drops %v", got, flows*per, a.RXPackets, a.Queues, a.Drops)
	if a.Queues != 4 {
		t.Errorf("link A summary shows %d queues, want 4 (one socket per RX queue)", a.Queues)
	}
	t.Logf("received per RX queue of A: %v", perQueue)
	busy := 0
	for _, n := range perQueue {
		if n > 0 {
			busy++
		}
	}
	if busy < 3 {
		t.Errorf("64 flows reached only %d of 4 RX queues: the test does not exercise queues beyond the workers", busy)
	}
	if got+int(a.TotalDrops()) < flows*per {
		t.Errorf("%d of %d datagrams delivered and %d drops counted: %d lost silently", got, flows*per, a.TotalDrops(), flows*per-got-int(a.TotalDrops()))
	}
	if got < flows*per*95/100 {
		t.Errorf("only %d of %d datagrams delivered at a low rate", got, flows*per)
	}
}

// TestManyQueuesBoundedMemory: links with 64 queues each on two workers
// start quickly, stay within 256 MiB of resident memory, and take a burst
// on every queue without running out of frames to receive into.
func TestManyQueuesBoundedMemory(t *testing.T) {
	p := newPair(t, topo.Options{Queues: 64, TxChecksum: true})
	rss0 := vmRSS(t)
	t0 := time.Now()
	r := start(t, p, fwd.Config{Queues: 2})
	startup := time.Since(t0)
	got := udpFlows(t, p, 256, 20, 20*time.Microsecond)
	rss := vmRSS(t) - rss0
	s := r.stop(t)
	a := s.Links[p.LinkA]
	t.Logf("64 queues per link, 2 workers: started in %v, RSS +%d MiB, UMEM %d MiB (%s); delivered %d of %d; drops %v",
		startup.Round(time.Millisecond), rss>>20, s.UMEM.SizeBytes>>20, s.UMEM.Backing, got, 256*20, a.Drops)
	if a.Queues != 64 {
		t.Errorf("link A has %d sockets, want 64", a.Queues)
	}
	if rss > 256<<20 {
		t.Errorf("resident memory grew by %d MiB, want under 256", rss>>20)
	}
	for _, k := range []string{fwd.DropFillRingEmpty, fwd.DropUMEMExhausted} {
		if a.Drops[k] != 0 {
			t.Errorf("%s = %d: fill rings starved", k, a.Drops[k])
		}
	}
	if got+int(a.TotalDrops()) < 256*20 {
		t.Errorf("%d delivered, %d drops counted, of %d: lost silently", got, a.TotalDrops(), 256*20)
	}
}

// udpFlows sends per datagrams on each of flows UDP flows (distinct source
// ports) from A to B, one every gap, and returns how many B received.
func udpFlows(t *testing.T, p *topo.Pair, flows, per int, gap time.Duration) int {
	t.Helper()
	var rc *net.UDPConn
	if err := p.B.Do(func() (err error) {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.V4B.AsSlice(), Port: 9009})
		if err == nil {
			err = rc.SetReadBuffer(8 << 20)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	conns := make([]*net.UDPConn, flows)
	for i := range conns {
		if err := p.A.Do(func() (err error) {
			conns[i], err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.V4B.AsSlice(), Port: 9009})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
	}
	counted := make(chan int)
	go func() {
		seen := make(map[uint64]bool, flows*per)
		buf := make([]byte, 64)
		for {
			rc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, err := rc.Read(buf)
			if err != nil {
				counted <- len(seen)
				return
			}
			if n >= 8 {
				seen[binary.BigEndian.Uint64(buf)] = true
			}
		}
	}()
	b := make([]byte, 32)
	for k := range per {
		for f, c := range conns {
			binary.BigEndian.PutUint64(b, uint64(f*per+k))
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			time.Sleep(gap)
		}
	}
	return <-counted
}

// TestQueueCountChangedWhileRunning: ethtool -L on a forwarded link while
// forwarding. The sockets no longer match the queues (new queues would
// have none, and what the XDP program cannot redirect reaches the
// kernel's stack), so Run ends with ErrQueuesChanged for the daemon to
// rebuild on the new queues, rather than forwarding on with a silent gap.
func TestQueueCountChangedWhileRunning(t *testing.T) {
	p := newPair(t, topo.Options{Queues: 4, TxChecksum: true})
	if err := ethtool.SetChannels(p.LinkA, 2, 2); err != nil {
		t.Fatal(err)
	}
	r := start(t, p, fwd.Config{Queues: 2})
	if err := ethtool.SetChannels(p.LinkA, 4, 4); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		r.done <- nil // for stop
		if !errors.Is(err, fwd.ErrQueuesChanged) {
			t.Fatalf("Run returned %v, want ErrQueuesChanged", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run still forwarding 10 s after link A went from 2 to 4 queues")
	}
	r.stop(t)
	// Built again, the forwarder serves all four.
	r = start(t, p, fwd.Config{Queues: 2})
	got := udpFlows(t, p, 64, 20, 100*time.Microsecond)
	s := r.stop(t)
	if a := s.Links[p.LinkA]; a.Queues != 4 || got+int(a.TotalDrops()) < 64*20 {
		t.Errorf("rebuilt: %d sockets on A, %d of %d delivered, drops %v", a.Queues, got, 64*20, a.Drops)
	}
}
