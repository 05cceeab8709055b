package fwd

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

// BenchmarkForward is one worker cross-connecting two links of one queue
// whose sockets are in memory (xsktest), round after round, as its loop
// runs them: each round the fake kernel receives a batch of 64 frames on
// link 0 into frames off its fill ring, and afterwards takes what the
// worker put on link 1's TX ring and completes it. ns/packet is the
// worker's whole cost per packet (refill, collect, lay out, send, reap)
// plus the fake kernel's, no syscall and no kernel: what a change to the
// per-packet path costs, measured without the noise of real traffic.
// 60-byte frames take the inline path (copied, their frame recycled at
// once), 512- and 1500-byte ones the frame path (sent from their frame,
// completed, refilled).
func BenchmarkForward(b *testing.B) { benchForward(b, false) }

// BenchmarkForwardAcross is BenchmarkForward with the two links in two
// UMEM domains (domain.go: a zero-copy NIC and a copy-mode veth): every
// packet is copied into the other domain, into an inline slot at 60
// bytes, into a frame of its own at 512 and 1500 (cross-connect has no
// frag zone), its own frame recycled at once. Against BenchmarkForward,
// side by side, it is the cost of the copy.
func BenchmarkForwardAcross(b *testing.B) { benchForward(b, true) }

func benchForward(b *testing.B, across bool) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchForwardSize(b, size, across) })
	}
}

var benchSizes = []int{60, 512, 1500}

func benchForwardSize(b *testing.B, size int, across bool) {
	const batch = 64
	cfg := umem.Config{FrameSize: 2048, Frames: 4096, InlineSlots: 1024, HugePages: umem.HugePagesOff}
	doms := []*domain{{}}
	if across {
		doms = append(doms, &domain{})
	}
	cfgs := make([]umem.Config, len(doms))
	for d := range cfgs {
		cfgs[d] = cfg
	}
	rs, err := umem.NewSpace(cfgs...)
	if err != nil {
		b.Fatal(err)
	}
	for d := range doms {
		doms[d].region = rs[d]
		b.Cleanup(func() { rs[d].Close() })
	}
	r := rs[0] // link 0 receives into it
	f := &Forwarder{
		doms: doms, plan: Plan{Batch: batch, RingSize: 512, Queues: 1, Spin: 64, FrameSize: 2048},
		links: make([]linkInfo, 2), ports: make([][]*port, 2), socks: make([][]*xsk.Socket, 2),
		policy: linearize.Policy{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 2048},
	}
	f.live.inlineMax.Store(256)
	var ks [2]*xsktest.Socket
	for i := range ks {
		ks[i] = xsktest.New(512, 0, 0)
		f.socks[i] = []*xsk.Socket{ks[i].Socket}
		p := &port{link: i, dom: min(i, len(doms)-1), sock: ks[i].Socket}
		p.tx = newLane(p)
		f.ports[i] = []*port{p}
	}
	w, err := newWorker(f, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.wake.close() })
	w.tap.point = capture.NewHub(1, []string{"a", "b"}).Point(0) // as New gives it
	// Every frame holds the packet already: the fake kernel only
	// hands out descriptors.
	mem := r.Mem()
	for i := range r.Frames.Len() {
		a := r.Frames.Base() + uint64(i)*2048 + 256
		binary.BigEndian.PutUint16(mem[a+12:], 0x88B5)
	}
	addrs := make([]uint64, batch)
	rx := make([]xsk.Desc, batch)
	tx := make([]xsk.Desc, 512)
	done := make([]uint64, 512)
	sent := 0
	w.round()
	b.ReportAllocs()
	for b.Loop() {
		n := ks[0].Fill.TakeAddrsInto(addrs)
		for i := range n {
			rx[i] = xsk.Desc{Addr: addrs[i] + 256, Len: uint32(size)}
		}
		ks[0].RX.Produce(rx[:n]...)
		ks[0].RX.Publish()
		w.round()
		m := ks[1].TX.TakeInto(tx)
		for i := range m {
			done[i] = tx[i].Addr
		}
		ks[1].Comp.ProduceAddrs(done[:m]...)
		ks[1].Comp.Publish()
		sent += m
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/packet")
	var violations uint64
	for _, r := range rs {
		violations += r.Frames.Violations() + r.Inline.Violations()
	}
	if sent < b.N*batch-batch || violations != 0 {
		b.Fatalf("%d of %d packets sent, %d ownership violations", sent, b.N*batch, violations)
	}
}

// TestForwardBenchmarks runs the benchmarks for their own checks (every
// packet sent, no ownership violation): a change that breaks what they
// measure fails here, not only when someone runs them. (A failed
// benchmark's result has no iterations.)
func TestForwardBenchmarks(t *testing.T) {
	for _, across := range []bool{false, true} {
		for _, size := range benchSizes {
			if r := testing.Benchmark(func(b *testing.B) { benchForwardSize(b, size, across) }); r.N == 0 {
				t.Errorf("BenchmarkForward (across domains %v) at %d bytes failed its checks", across, size)
			}
		}
	}
}
