package fwd_test

import (
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
)

// counter is a Handler that drops everything and says it needs no
// promiscuous mode, as modes.Sink does.
type counter struct{}

func (counter) Handle(pkts []fwd.Packet) {}
func (counter) Promiscuous() bool        { return false }

// TestPromiscHeldWhileRunning: a forwarder holds both links promiscuous
// from New to Close when its mode carries frames for other MACs (the
// default cross-connect, a Handler that does not say otherwise), and not
// when told off or when its Handler needs none; after Close the count is
// back to 0. Before it did, no forwarder set it: a NIC dropped every
// unicast frame not addressed to its own MAC.
func TestPromiscHeldWhileRunning(t *testing.T) {
	t.Parallel()
	drop := fwd.HandlerFunc(func([]fwd.Packet) {})
	for _, tc := range []struct {
		name    string
		promisc fwd.PromiscMode
		handler fwd.Handler
		want    int
	}{
		{"xconnect auto", fwd.PromiscAuto, nil, 1},
		{"xconnect off", fwd.PromiscOff, nil, 0},
		{"handler auto", fwd.PromiscAuto, drop, 1},
		{"sink-like auto", fwd.PromiscAuto, counter{}, 0},
		{"sink-like on", fwd.PromiscOn, counter{}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPair(t, topo.Options{})
			r := start(t, p, fwd.Config{Promisc: tc.promisc, Handler: tc.handler})
			for _, l := range []string{p.LinkA, p.LinkB} {
				if n := topo.Promiscuity(t, l); n != tc.want {
					t.Errorf("%s while forwarding: promiscuity %d, want %d", l, n, tc.want)
				}
			}
			r.stop(t)
			for _, l := range []string{p.LinkA, p.LinkB} {
				if n := topo.Promiscuity(t, l); n != 0 {
					t.Errorf("%s after Close: promiscuity %d, want 0", l, n)
				}
			}
		})
	}
}

// TestFakePromiscuous: the forwarder holds a promiscuous membership on each
// link from New to Close when its mode carries frames for other MACs (the
// cross-connect, a Handler that does not say otherwise), none when told
// off or when its Handler needs none (fwd.PromiscHandler). The veth twin,
// TestPromiscHeldWhileRunning, reads the kernel's count.
func TestFakePromiscuous(t *testing.T) {
	drop := fwd.HandlerFunc(func([]fwd.Packet) {})
	for _, tc := range []struct {
		name    string
		promisc fwd.PromiscMode
		handler fwd.Handler
		want    int
	}{
		{"xconnect auto", fwd.PromiscAuto, nil, 1},
		{"xconnect off", fwd.PromiscOff, nil, 0},
		{"handler auto", fwd.PromiscAuto, drop, 1},
		{"sink auto", fwd.PromiscAuto, modes.Sink, 0},
		{"sink on", fwd.PromiscOn, modes.Sink, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startFake(t, fwd.Config{Promisc: tc.promisc, Handler: tc.handler}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
			for i, l := range r.links {
				if n := l.Promiscuous(); n != tc.want {
					t.Errorf("link %d while forwarding: %d memberships, want %d", i, n, tc.want)
				}
			}
			r.close()
			for i, l := range r.links {
				if n := l.Promiscuous(); n != 0 {
					t.Errorf("link %d after Close: %d memberships, want 0", i, n)
				}
			}
		})
	}
}
