package fwd

import (
	"fmt"
	"testing"

	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// umemBytes is the UMEM New maps for workers workers on two links of
// queues RX (and TX) queues each, at the default frame size and ring size.
func umemBytes(workers, queues int) (bytes int64, ring uint32) {
	cfg := Plan{Queues: workers, FrameSize: 2048, InlineMax: 256, FragOrder: 4}
	l := linkInfo{rxQueues: queues, txQueues: queues}
	links := []linkInfo{l, l}
	cfg.RingSize = autoRingSize(workers, links)
	u := umemConfig(&cfg, links)
	n := int64(u.Frames)*int64(u.FrameSize) + int64(u.InlineSlots)*umem.InlineSlotSize + int64(u.FragBlocks)*int64(u.FragBlockSize())
	return n, cfg.RingSize
}

// TestUMEMBoundedByWorkers: memory grows with the workers, not with the
// queues a NIC has. Ring sizes shrink as a worker reads more queues, so
// with W workers the UMEM stays within what W workers on W queues take
// (28 MiB a worker, 2 MiB of inline slots) until the ring size reaches its
// floor, and past that grows by at most 256 KiB per RX queue. The deploy/ manifests size their memory by the
// first bound; 64 queues per link on 2 workers is the shape.
func TestUMEMBoundedByWorkers(t *testing.T) {
	for w := 1; w <= 8; w++ {
		for q := w; q <= 256; q++ {
			bound := int64(w*28+2) << 20
			if q > 32*w {
				bound += int64(2*q) << 18
			}
			if got, ring := umemBytes(w, q); got > bound {
				t.Errorf("%d workers, %d queues per link: UMEM %d MiB (ring %d), over the %d MiB bound", w, q, got>>20, ring, bound>>20)
			}
		}
	}
	if got, _ := umemBytes(2, 64); got > 32<<20 {
		t.Errorf("64 queues per link on 2 workers: UMEM %d MiB, want at most 32", got>>20)
	}
	for _, s := range [][2]int{{1, 1}, {2, 2}, {2, 4}, {2, 8}, {2, 16}, {2, 64}, {4, 4}, {4, 64}} {
		b, ring := umemBytes(s[0], s[1])
		t.Log(fmt.Sprintf("| %d | %d | %d | %d MiB |", s[0], s[1], ring, b>>20))
	}
}

// TestUMEMFramesCoverCaches: a UMEM holds, at once, a full fill ring per
// socket (and in zero-copy mode the driver's hardware ring), a TX ring's
// worth in flight per lane, and what the other workers' caches may keep
// free out of a starving worker's reach. Without the hardware rings and
// the caches a zero-copy domain sized for two igb NICs at ring 128 (1,536
// frames, of which igb's four 256-entry rings held 1,024) starved the fill
// rings: TCP through the switch stalled (internal/vmtest).
func TestUMEMFramesCoverCaches(t *testing.T) {
	for _, tc := range []struct {
		workers, queues int
		ring            uint32
	}{{1, 1, 64}, {2, 2, 128}, {2, 4, 64}, {4, 4, 2048}} {
		p := Plan{Queues: tc.workers, FrameSize: 4096, InlineMax: 256, FragOrder: 4, RingSize: tc.ring}
		nic := linkInfo{rxQueues: tc.queues, txQueues: tc.queues, rxRing: 256,
			zc: xsk.ZeroCopyFeatures{Known: true, ZeroCopy: true}}
		veth := linkInfo{rxQueues: tc.queues, txQueues: tc.queues, veth: true}
		links := []linkInfo{nic, veth}
		need := tc.queues * nic.rxRing
		for range links {
			for q := range tc.queues {
				need += int(fillSize(&p, q))
			}
			need += tc.workers * int(tc.ring)
		}
		need += (tc.workers - 1) * frameCacheSize
		if got := umemConfig(&p, links).Frames; got < need {
			t.Errorf("%d workers, %d queues, ring %d: %d frames, want at least %d (fill and TX rings, %d other caches of %d)",
				tc.workers, tc.queues, tc.ring, got, need, tc.workers-1, frameCacheSize)
		}
	}
}
