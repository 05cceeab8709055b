package fwd_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/xps"
)

// TestNoAllocPerPacket forwards 100,000 packets of every path (inline,
// frame, and with two queues the flow table and handoffs) and checks the
// whole process allocated next to nothing meanwhile: the sender is an
// AF_XDP socket (inline.Sender, allocation-free) and nothing in B reads
// the packets, so every allocation would be the forwarder's.
func TestNoAllocPerPacket(t *testing.T) {
	for _, c := range []struct {
		name   string
		queues int
		cfg    fwd.Config
	}{
		{"one-queue", 1, fwd.Config{}},
		{"two-queues-sticky", 2, fwd.Config{Queues: 2, XPS: xps.ModeSticky}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, topo.Options{Queues: c.queues})
			r := start(t, p, c.cfg)
			senders, src, dst := afxdpSenders(t, p, []int{0}, 1024)
			s := senders[0]
			frames := [][]byte{
				topo.UDPFrame(dst, src, p.V4A, p.V4B, 1000, 9, 64),   // inline
				topo.UDPFrame(dst, src, p.V4A, p.V4B, 1001, 9, 1400), // frame
			}
			send := func(n int) {
				for k := 0; k < n; k++ {
					for {
						ok, err := s.Send(frames[k%2])
						if err != nil {
							t.Fatal(err)
						}
						if ok {
							break
						}
					}
				}
				if err := s.Wait(2 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			send(10000) // warm up: caches, maps, tables
			// Waiting for the forwarder to finish polls its counters,
			// which allocates: what one read costs is measured here and
			// taken off below.
			tx := func() uint64 { return r.f.LinkStats(1).TXPackets }
			var c0, c1 runtime.MemStats
			runtime.ReadMemStats(&c0)
			for range 10 {
				tx()
			}
			runtime.ReadMemStats(&c1)
			perRead := (c1.Mallocs - c0.Mallocs + 9) / 10
			before := tx()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			const n = 100000
			send(n)
			// Until the forwarder's TX count stops moving.
			reads := uint64(1)
			last, since, deadline := tx(), time.Now(), time.Now().Add(5*time.Second)
			for time.Since(since) < settleQuiet && time.Now().Before(deadline) {
				time.Sleep(pollEvery)
				reads++
				if v := tx(); v != last {
					last, since = v, time.Now()
				}
			}
			runtime.ReadMemStats(&m1)
			fwdd := last - before
			allocs := max(int64(m1.Mallocs-m0.Mallocs)-int64(reads*perRead), 0)
			t.Logf("%d packets sent, %d forwarded, %d allocations in the process (%.5f per packet; %d reads of the counters, %d allocations each, taken off)",
				n, fwdd, allocs, float64(allocs)/float64(fwdd), reads, perRead)
			if fwdd < n/20 { // the AF_XDP sender outruns the forwarder; drops are counted elsewhere
				t.Fatalf("only %d of %d packets forwarded", fwdd, n)
			}
			if uint64(allocs) > fwdd/1000 {
				t.Errorf("%d allocations for %d packets: the datapath allocates per packet", allocs, fwdd)
			}
		})
	}
}
