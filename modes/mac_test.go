package modes_test

import (
	"bytes"
	"net"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// TestMAC: with 1, 2 and 3 links, each frame leaves by its link's partner
// (0↔1; a lone link back out of itself) with the destination MAC that
// link's peer and the source MAC that link's own, every other byte as it
// was; a frame under 14 bytes is dropped.
func TestMAC(t *testing.T) {
	own := []net.HardwareAddr{{2, 0, 0, 0, 0, 0xa0}, {2, 0, 0, 0, 0, 0xa1}, {2, 0, 0, 0, 0, 0xa2}}
	peers := []net.HardwareAddr{{2, 0, 0, 0, 0, 0xb0}, {2, 0, 0, 0, 0, 0xb1}, {2, 0, 0, 0, 0, 0xb2}}
	for _, c := range []struct {
		name    string
		links   int
		peers   []net.HardwareAddr
		in, out int
		reflect bool
	}{
		{"one link", 1, peers[:1], 0, 0, true},
		{"two links 0→1", 2, peers[:2], 0, 1, false},
		{"two links 1→0", 2, peers[:2], 1, 0, false},
		{"two links one peer", 2, peers[2:3], 1, 0, false},
		{"three links 1→0", 3, peers[:3], 1, 0, false},
		{"three links lone 2", 3, peers[:3], 2, 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := modes.NewMAC(c.links, c.peers)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.SetLinkAddrs(own[:c.links]); err != nil {
				t.Fatal(err)
			}
			s := v4(vlan, 17, 0, 0, udpSeg(1, 2, 20), 0)
			b := append([]byte{}, s.b...)
			pkts := []fwd.Packet{{Data: b, Len: len(b), Link: c.in}, {Data: make([]byte, 13), Len: 13, Link: c.in}}
			m.Handle(pkts)
			peer := c.peers[min(c.out, len(c.peers)-1)]
			want := append(append(append([]byte{}, peer...), own[c.out]...), s.b[12:]...)
			if !bytes.Equal(b, want) {
				t.Errorf("frame:\n got % x\nwant % x", b, want)
			}
			v, out := pkts[0].Verdict()
			switch {
			case c.reflect && v != fwd.VerdictReflect:
				t.Errorf("verdict %v, want reflect", v)
			case !c.reflect && (v != fwd.VerdictForward || int(out) != c.out):
				t.Errorf("verdict %v out %d, want forward out of %d", v, out, c.out)
			}
			if v, _ := pkts[1].Verdict(); v != fwd.VerdictDrop {
				t.Errorf("13-byte frame: verdict %v, want drop", v)
			}
			if _, ok := any(m).(fwd.PromiscHandler); ok {
				t.Errorf("mac opts out of promiscuous mode: it must get frames for other MACs")
			}
		})
	}
}

// TestNewMACErrors: bad link counts and addresses are refused with an
// error, not a panic.
func TestNewMACErrors(t *testing.T) {
	p := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	for _, c := range []struct {
		name  string
		links int
		peers []net.HardwareAddr
	}{
		{"no links", 0, []net.HardwareAddr{p}},
		{"too many links", fwd.MaxLinks + 1, []net.HardwareAddr{p}},
		{"no peer", 2, nil},
		{"peers short of links", 3, []net.HardwareAddr{p, p}},
		{"EUI-64 peer", 1, []net.HardwareAddr{{2, 0, 0, 0, 0, 0, 0, 1}}},
	} {
		if _, err := modes.NewMAC(c.links, c.peers); err == nil {
			t.Errorf("%s: NewMAC accepted it", c.name)
		}
	}
	m, err := modes.NewMAC(2, []net.HardwareAddr{p})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetLinkAddrs([]net.HardwareAddr{p}); err == nil {
		t.Errorf("SetLinkAddrs accepted 1 address for 2 links")
	}
	if err := m.SetLinkAddrs([]net.HardwareAddr{p, {1, 2}}); err == nil {
		t.Errorf("SetLinkAddrs accepted a 2-byte address")
	}
}
