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
			before := r.f.LinkStats(1).TXPackets
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			const n = 100000
			send(n)
			time.Sleep(100 * time.Millisecond)
			runtime.ReadMemStats(&m1)
			fwdd := r.f.LinkStats(1).TXPackets - before
			allocs := m1.Mallocs - m0.Mallocs
			t.Logf("%d packets sent, %d forwarded, %d allocations in the process (%.5f per packet)", n, fwdd, allocs, float64(allocs)/float64(fwdd))
			if fwdd < n/20 { // the AF_XDP sender outruns the forwarder; drops are counted elsewhere
				t.Fatalf("only %d of %d packets forwarded", fwdd, n)
			}
			if allocs > fwdd/1000 {
				t.Errorf("%d allocations for %d packets: the datapath allocates per packet", allocs, fwdd)
			}
		})
	}
}
