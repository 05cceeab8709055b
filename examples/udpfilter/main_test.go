package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestFilter: between two namespaces joined by the filter, UDP to the
// filtered port never arrives, UDP to another port does, and so do a ping
// and a TCP transfer; each filtered datagram is counted as a handler drop.
func TestFilter(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{TxChecksum: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := fwd.New(fwd.Config{Links: []string{p.LinkA, p.LinkB}, Handler: Filter{Port: 9}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if s, err := f.Shutdown(); err != nil || s.UMEM.LeakedAddresses != 0 {
			t.Errorf("shutdown: %v, %d leaked", err, s.UMEM.LeakedAddresses)
		}
	}()
	if _, err := topo.Ping(p.A, p.V4B, 3, 3*time.Second); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if _, err := topo.TCPTransfer(p.A, p.B, p.V4B, 4<<20, 20*time.Second); err != nil {
		t.Fatalf("TCP: %v", err)
	}
	const n = 300
	before := f.LinkStats(0).Drops[fwd.DropHandler]
	got := map[int]int{}
	for _, port := range []int{9, 10} {
		got[port] = udpCount(t, p, port, n)
	}
	dropped := f.LinkStats(0).Drops[fwd.DropHandler] - before
	t.Logf("port 9: %d of %d arrived; port 10: %d of %d; %d filtered", got[9], n, got[10], n, dropped)
	if got[9] != 0 {
		t.Errorf("%d datagrams to the filtered port arrived", got[9])
	}
	if got[10] < n*95/100 {
		t.Errorf("only %d of %d datagrams to port 10 arrived", got[10], n)
	}
	if dropped != n {
		t.Errorf("%d datagrams counted as filtered, want %d", dropped, n)
	}
}

// udpCount sends n datagrams from A to port on B, paced, and returns how
// many B received.
func udpCount(t *testing.T, p *topo.Pair, port, n int) int {
	t.Helper()
	var rc, sc *net.UDPConn
	if err := p.B.Do(func() (err error) {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.V4B.AsSlice(), Port: port})
		if err == nil {
			err = rc.SetReadBuffer(4 << 20) // the burst is read after it is sent
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := p.A.Do(func() (err error) {
		sc, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.V4B.AsSlice(), Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for range n {
		if _, err := sc.Write([]byte("udpfilter test")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Microsecond)
	}
	got := 0
	buf := make([]byte, 64)
	for {
		rc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := rc.Read(buf); err != nil {
			return got
		}
		got++
	}
}
