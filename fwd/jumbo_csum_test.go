package fwd_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestJumboTCPDefaultOffloads is a container's jumbo TCP as it comes: MTU
// 9000 on every veth end, the namespace ends at their default offloads (TX
// checksum offload on, so every segment arrives with a partial checksum),
// multi-buffer sockets. A 9000-byte segment arrives as a chain of frames;
// it leaves as that chain (4096-byte frames), repacked into a frag block
// (2048-byte frames: more pieces than --max-tx-frags), or, when shorter,
// as a shorter chain. Whatever the layout, the checksum must be finished,
// or the receiver drops the segment and TCP stalls. (With 2048-byte frames
// only chains were left partial: full segments were repacked and
// finished, but a short one — the tail of a write, at most --max-tx-frags
// frames — left as a chain, was dropped, and was retransmitted as the
// same chain until the transfer timed out.) Both directions, IPv4 and
// IPv6, one queue and two.
func TestJumboTCPDefaultOffloads(t *testing.T) {
	const n = 4 << 20
	for _, tc := range []struct {
		frameSize, queues int
		wantPath          string // the path full-sized segments take
	}{
		{2048, 1, "frag"},
		{4096, 1, "chain"},
		{2048, 2, "frag"},
		{4096, 2, "chain"},
	} {
		t.Run(fmt.Sprintf("frame%d-queues%d", tc.frameSize, tc.queues), func(t *testing.T) {
			p := newPair(t, topo.Options{MTU: 9000, TxChecksum: true, Queues: tc.queues})
			r := start(t, p, fwd.Config{FrameSize: tc.frameSize, MultiBufferMode: fwd.MultiBufferOn, Queues: tc.queues})
			failed := false
			for _, c := range []struct {
				name     string
				src, dst *topo.NS
				addr     netip.Addr
			}{{"v4 A→B", p.A, p.B, p.V4B}, {"v6 B→A", p.B, p.A, p.V6A}} {
				before := netstat(t, c.dst)
				res, err := topo.TCPTransfer(c.src, c.dst, c.addr, n, 15*time.Second)
				after := netstat(t, c.dst)
				bad := after["Tcp.InCsumErrors"] - before["Tcp.InCsumErrors"]
				if err != nil {
					// Go on to the other direction: which cases fail is
					// the finding.
					t.Errorf("TCP %s: %v (receiver counted %d checksum errors)", c.name, err, bad)
					failed = true
					continue
				}
				t.Logf("TCP %s: %d MiB byte-exact, %.2f Gbit/s, receiver checksum errors %d", c.name, res.Bytes>>20, res.Gbps, bad)
				if bad != 0 {
					t.Errorf("TCP %s: receiver counted %d checksum errors", c.name, bad)
				}
			}
			s := r.stop(t)
			la, lb := s.Links[p.LinkA], s.Links[p.LinkB]
			t.Logf("paths to %s %v, to %s %v; checksums completed from %s %d, from %s %d",
				p.LinkB, lb.TXPaths, p.LinkA, la.TXPaths, p.LinkA, la.ChecksumsCompleted, p.LinkB, lb.ChecksumsCompleted)
			if failed {
				return
			}
			for _, l := range []fwd.LinkStats{la, lb} {
				if l.TXPaths[tc.wantPath] == 0 {
					t.Errorf("no packet took the %s path: %v", tc.wantPath, l.TXPaths)
				}
			}
			// Each direction carried n bytes in segments of at most 8948
			// (IPv4) or 8928 (IPv6) bytes, every one of them partial.
			if least := uint64(n / 8948); la.ChecksumsCompleted < least || lb.ChecksumsCompleted < least {
				t.Errorf("checksums completed %d and %d, want at least %d each", la.ChecksumsCompleted, lb.ChecksumsCompleted, least)
			}
		})
	}
}
