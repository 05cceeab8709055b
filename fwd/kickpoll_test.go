package fwd_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestKickPoll: on the kernel's veths, a switch whose rounds send to many
// links at once (bursts from host 0 spread over five hosts in turn, as
// to a node's pods) kicks their TX rings with one ppoll a round: every
// datagram arrives, and the worker counts kick polls.
func TestKickPoll(t *testing.T) {
	topo.RequireRoot(t)
	const hosts, count = 6, 6400
	h, f := runVethSwitch(t, hosts, 1)
	for _, l := range h.Links[2:] {
		if err := f.AddLink(l); err != nil {
			t.Fatalf("AddLink(%s): %v", l, err)
		}
	}
	var dsts []gen.Host
	for i := 1; i < hosts; i++ {
		// Every host learned, so nothing is flooded.
		if res, err := topo.Ping(h.NS[i], h.V4[0], 1, 2*time.Second); err != nil || res.Received != 1 {
			t.Fatalf("ping from host %d: %+v %v", i, res, err)
		}
		mac, err := h.NS[i].HardwareAddr("eth0")
		if err != nil {
			t.Fatal(err)
		}
		dsts = append(dsts, gen.Host{MAC: mac, IP: h.V4[i]})
	}
	// A receiver on every host, on one port, read while the burst runs.
	const port = 9999
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		conns []*net.UDPConn
	)
	got := make([]int, hosts)
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; i < hosts; i++ {
		var c *net.UDPConn
		if err := h.NS[i].Do(func() (err error) {
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.V4[i], port)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(deadline)
		conns = append(conns, c)
		wg.Go(func() {
			b := make([]byte, 2048)
			for {
				if _, err := c.Read(b); err != nil {
					return // the deadline, or closed once all arrived
				}
				mu.Lock()
				got[i]++
				total++
				if total == count {
					for _, c := range conns {
						c.SetReadDeadline(time.Now())
					}
				}
				mu.Unlock()
			}
		})
	}
	var g *gen.Generator
	if err := h.NS[0].Do(func() (err error) {
		g, err = gen.New(gen.Config{Links: []string{"eth0"}, Sizes: []int{64}, Count: count, Rate: 100e3, Flows: len(dsts),
			Template: gen.Template{SrcIP: h.V4[0], DstPort: port, DstHosts: dsts}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("generator: %v", err)
	}
	wg.Wait()
	// The generator's buffers take the flows in turn, so the hosts' shares
	// differ by a few datagrams (its ring of 2048 is not a multiple of 5).
	if total != count {
		t.Errorf("%d of %d datagrams arrived: %v by host", total, count, got[1:])
	}
	for i := 1; i < hosts; i++ {
		if want := count / (hosts - 1); got[i] < want*99/100 {
			t.Errorf("host %d received %d datagrams, want about %d", i, got[i], want)
		}
	}
	var polls uint64
	for _, w := range f.WorkerStats() {
		polls += w.KickPolls
	}
	var kicks uint64
	for i := range h.Links {
		kicks += f.LinkStats(i).TXKicks
	}
	t.Logf("%d datagrams to %d hosts: %d kick polls, %d sendto kicks", count, hosts-1, polls, kicks)
	if polls == 0 {
		t.Error("no kick poll: every round's TX rings were kicked one by one")
	}
}
