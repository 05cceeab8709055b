package fwd_test

import (
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// Waiting for a state, not for a time: the helpers below poll, every few
// milliseconds, until what a test waits for has happened, and fail the test
// at a deadline. Sleeps that pace traffic or make an outage last stay
// sleeps.

// pollEvery is the polling interval of the wait helpers.
const pollEvery = 10 * time.Millisecond

// waitFor polls cond until it holds; it fails the test (Fatal) after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(pollEvery)
	}
}

// linkCounts is a comparable snapshot of the counters of a forwarder's two
// links that move while packets are in flight through it.
type linkCounts [2]struct{ rx, tx, drops, kicks uint64 }

func countsOf(f *fwd.Forwarder) linkCounts {
	var c linkCounts
	for i := range c {
		s := f.LinkStats(i)
		c[i].rx, c[i].tx, c[i].drops, c[i].kicks = s.RXPackets, s.TXPackets, s.TotalDrops(), s.KickErrors
	}
	return c
}

// settleQuiet is how long a forwarder's counters must stay still for what
// was sent to be through it: far longer than it takes to move a ring's
// worth of packets, even on a loaded machine.
const settleQuiet = 100 * time.Millisecond

// waitSettled waits until the forwarder's packet counters have not changed
// for settleQuiet: everything sent so far has been forwarded or dropped.
// kicks counts the failed TX wake-ups too, which keep growing while a link
// is down with packets queued; leave it false then. It fails the test after
// within.
func waitSettled(t *testing.T, f *fwd.Forwarder, kicks bool, within time.Duration) {
	t.Helper()
	read := func() linkCounts {
		c := countsOf(f)
		if !kicks {
			c[0].kicks, c[1].kicks = 0, 0
		}
		return c
	}
	deadline := time.Now().Add(within)
	last, since := read(), time.Now()
	for time.Since(since) < settleQuiet {
		if time.Now().After(deadline) {
			t.Fatalf("forwarder counters still moving after %v: %+v", within, last)
		}
		time.Sleep(pollEvery)
		if c := read(); c != last {
			last, since = c, time.Now()
		}
	}
}
