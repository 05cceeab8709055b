package fwd_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestDefaultOffloads leaves TX checksum offload on in the namespaces, as a
// container's veth has it: TCP and UDP, over IPv4 and IPv6, must cross
// byte for byte with checksum completion on (the default for veth), and
// the completions are counted. With it off, TCP does not get through.
func TestDefaultOffloads(t *testing.T) {
	p := newPair(t, topo.Options{TxChecksum: true})
	r := start(t, p, fwd.Config{})
	for _, c := range []struct {
		name     string
		src, dst *topo.NS
		addr     netip.Addr
	}{{"v4 A→B", p.A, p.B, p.V4B}, {"v6 B→A", p.B, p.A, p.V6A}} {
		res, err := topo.TCPTransfer(c.src, c.dst, c.addr, 16<<20, 30*time.Second)
		if err != nil {
			t.Fatalf("TCP %s with default offloads: %v", c.name, err)
		}
		t.Logf("TCP %s: %d MiB byte-exact, %.2f Gbit/s", c.name, res.Bytes>>20, res.Gbps)
		u, err := topo.UDPBurst(c.src, c.dst, c.addr, 5000, 512, 10*time.Second)
		if err != nil || u.Received < 2500 {
			t.Fatalf("UDP %s with default offloads: %+v %v", c.name, u, err)
		}
	}
	s := r.stop(t)
	done := s.Links[p.LinkA].ChecksumsCompleted + s.Links[p.LinkB].ChecksumsCompleted
	t.Logf("checksums completed: %s %d, %s %d", p.LinkA, s.Links[p.LinkA].ChecksumsCompleted, p.LinkB, s.Links[p.LinkB].ChecksumsCompleted)
	if done < 10000 {
		t.Errorf("only %d checksums completed; expected every offloaded segment", done)
	}

	t.Run("off", func(t *testing.T) {
		p := newPair(t, topo.Options{TxChecksum: true})
		start(t, p, fwd.Config{Checksums: fwd.ChecksumsOff})
		if _, err := topo.TCPTransfer(p.A, p.B, p.V4B, 1<<20, 3*time.Second); err == nil {
			t.Error("TCP crossed with partial checksums left unfinished: the test does not test what it claims")
		}
	})
}
