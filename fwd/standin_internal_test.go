package fwd

import (
	"testing"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// TestStandIn hands packets from worker 1 (RX queue 1 of link 0) to worker
// 0, the owner of TX queue 0 of link 1, in each state the owner can be in:
// awake, asleep with its lease free, asleep but taking its lease back, and
// asleep with a packet whose turn has not come. Only an owner asleep with
// a free lease is stood in for, in arrival order, without a wake-up; in
// every other state the owner is woken (if it sleeps) and sends the packet
// itself.
func TestStandIn(t *testing.T) {
	type want struct {
		sent    []string // on TX queue 0 of link 1 once the handoffs are published
		stoodIn uint64
		wakes   uint64
	}
	cases := []struct {
		name   string
		asleep bool
		lease  int32
		// ahead: a packet from the owner's own RX queue, handed before
		// the one from worker 1 and older than it.
		ahead bool
		due   bool // the packets' turn has come
		want  want
	}{
		{"owner awake", false, leaseHeld, false, true, want{nil, 0, 0}},
		{"owner asleep, lease free", true, leaseFree, false, true, want{[]string{"x"}, 1, 0}},
		{"owner asleep, lease free, an older packet of its own queue first", true, leaseFree, true, true, want{[]string{"a", "x"}, 1, 0}},
		{"owner asleep, taking its lease back", true, leaseHeld, false, true, want{nil, 0, 1}},
		{"owner asleep, lent to another stand-in", true, leaseLent, false, true, want{nil, 0, 1}},
		{"owner asleep, the packet's turn not come", true, leaseFree, false, false, want{nil, 1, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newMergeRig(t, 2, 64)
			owner := g.w[0]
			stamp := g.now - usec(1000)
			if !tc.due {
				stamp = g.now
			}
			g.publish(1) // worker 1's watermark: it read up to now
			if tc.ahead {
				// Handed by the owner to itself before it slept.
				p := g.port(0, 0)
				owner.flows.order.push(p, 0, 1, []xsk.Desc{{Addr: g.frame("a"), Len: 60}}, stamp-1, g.now)
				owner.flows.order.publishTails(p)
			}
			owner.wake.sleeping.Store(tc.asleep)
			owner.wake.idle.Store(tc.asleep)
			owner.lease.state.Store(tc.lease)
			g.hand(0, 1, 0, "x", stamp, 1)
			now := g.sent(1, 0)
			if !sameNames(now, tc.want.sent) {
				t.Errorf("sent %v at once, want %v", now, tc.want.sent)
			}
			if n := owner.stoodIn.Load(); n != tc.want.stoodIn {
				t.Errorf("stood in %d times, want %d", n, tc.want.stoodIn)
			}
			if n := owner.wake.wakes.Load(); n != tc.want.wakes {
				t.Errorf("%d eventfd writes to the owner, want %d", n, tc.want.wakes)
			}
			if s := owner.lease.state.Load(); s != tc.lease {
				t.Errorf("lease %d after the handoff, want it as the owner left it, %d", s, tc.lease)
			}
			// Whatever was not sent at once, the owner sends when it runs.
			owner.lease.state.Store(leaseHeld)
			g.now += usec(1000)
			g.publish(1)
			owner.merge()
			rest := g.sent(1, 0)
			if len(now)+len(rest) != 1+btoi(tc.ahead) {
				t.Errorf("sent %v at once and %v by the owner: want every packet once", now, rest)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
