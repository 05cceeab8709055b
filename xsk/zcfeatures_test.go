package xsk_test

import (
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// TestLinkZeroCopy: the kernel (≥ 6.3) answers for loopback and veth,
// neither of which has AF_XDP zero-copy, so neither reports zero-copy
// segments.
func TestLinkZeroCopy(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	veth, err := netlink.LinkByName(p.LinkA)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct {
		name    string
		ifindex int
	}{{"lo", 1}, {p.LinkA, veth.Attrs().Index}} {
		f, err := xsk.LinkZeroCopy(l.ifindex)
		if err != nil {
			t.Fatalf("LinkZeroCopy(%s): %v", l.name, err)
		}
		t.Logf("%s: %+v", l.name, f)
		if !f.Known || f.ZeroCopy || f.MaxSegs > 1 {
			t.Errorf("LinkZeroCopy(%s) = %+v; want known, no zero-copy, no zero-copy segments", l.name, f)
		}
	}
	if _, err := xsk.LinkZeroCopy(1 << 30); err == nil {
		t.Error("LinkZeroCopy of a missing ifindex: no error")
	}
}
