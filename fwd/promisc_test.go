package fwd_test

import (
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
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
