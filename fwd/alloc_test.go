package fwd_test

import (
	"runtime"
	"strings"
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
//
// The whole process also allocates for reasons of its own, at a rate per
// second, not per packet: the link monitor's queue check (netlink, once a
// second), the runtime. On a loaded machine the window lasts seconds and
// those add up to hundreds, so the claim is checked on what the workers'
// goroutines allocate, from a memory profile of every allocation; the
// whole process's count is logged beside it.
func TestNoAllocPerPacket(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
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
			w0 := workerAllocs()
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
			inWorkers := workerAllocs() - w0
			t.Logf("%d packets sent, %d forwarded, %d allocations by the workers; %d in the whole process (%d reads of the counters, %d allocations each, taken off)",
				n, fwdd, inWorkers, allocs, reads, perRead)
			// The AF_XDP sender outruns the forwarder (drops are
			// counted elsewhere); a loaded machine forwards a few
			// percent of it, still thousands of packets.
			if fwdd < n/100 {
				t.Fatalf("only %d of %d packets forwarded", fwdd, n)
			}
			if uint64(inWorkers) > fwdd/1000 {
				t.Errorf("%d allocations by the workers for %d packets: the datapath allocates per packet", inWorkers, fwdd)
			}
		})
	}
}

// workerAllocs is the number of objects allocated so far on the workers'
// goroutines (stacks through (*worker).run), from the memory profile; two
// collections publish the profile up to now.
func workerAllocs() int64 {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	var total int64
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.Contains(f.Function, "fwd.(*worker).run") {
				total += r.AllocObjects
				break
			}
			if !more {
				break
			}
		}
	}
	return total
}
