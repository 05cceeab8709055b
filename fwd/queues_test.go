package fwd_test

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestEveryRXQueueServed: links with more RX queues than workers, as a NIC
// with more channels than CPUs has. 64 UDP flows spread over the four
// queues of a link; two workers must serve all of them, each flow in
// order. On the code this test was written against, xdpfwd opened sockets
// on queues 0–1 only and the XDP program passed what arrived on 2–3 to the
// kernel, uncounted: about 1,900 of 3,200 datagrams arrived. On the fake
// environment: no root.
func TestEveryRXQueueServed(t *testing.T) {
	const flows, per = 64, 50
	four := fwdtest.LinkOptions{Queues: 4}
	r := startFake(t, fwd.Config{Queues: 2}, four, four)
	var out []fwdtest.Frame
	for k := range per {
		for fl := range flows {
			r.inject(0, fl%4, seqFrame(macB, macA, uint16(2000+fl), uint32(k), 100), fwdtest.RX{})
		}
		r.env.Advance(100 * time.Microsecond) // past the merge's slack
		out = append(out, r.links[1].Collect()...)
	}
	r.env.Advance(time.Millisecond)
	out = append(out, r.links[1].CollectN(flows*per-len(out), 5*time.Second)...)
	if len(out) != flows*per {
		t.Fatalf("%d of %d frames out", len(out), flows*per)
	}
	next := map[uint16]uint32{}
	for _, g := range out {
		fl := binary.BigEndian.Uint16(g.Data[34:])
		if s := seqOf(g.Data); s != next[fl] {
			t.Fatalf("flow %d: seq %d out, want %d", fl, s, next[fl])
		}
		next[fl]++
	}
	for q := range 4 {
		if n := r.f.QueueStats(0, q).RXPackets; n != flows/4*per {
			t.Errorf("RX queue %d of link 0: %d received, want %d", q, n, flows/4*per)
		}
	}
	if a, c := r.f.LinkStats(0), r.links[0].Counters(); a.Queues != 4 || a.TotalDrops() != 0 || c.Passed != 0 {
		t.Errorf("link 0: %d queues (want 4, a socket each), drops %v, %d passed to the stack (want none)", a.Queues, a.Drops, c.Passed)
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
