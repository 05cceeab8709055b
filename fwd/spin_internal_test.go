package fwd

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSpinner plays dry spells through a spinner: 'c' a spin that caught
// a packet, 'm' one that ran out, '.' a dry spell it slept through at
// once. The default spins every time until spinGiveUp spins in a row
// caught nothing, then sleeps at once and probes with a spin every
// spinProbe-th dry spell, and spins every time again once a probe
// catches; --spin N never gives up; a negative spin never spins.
func TestSpinner(t *testing.T) {
	gaveUp := strings.Repeat(".", spinProbe-1)
	for _, tc := range []struct {
		name string
		spin int
		// outcome of each spin, in order; dry spells without a spin take
		// none.
		outcomes string
		want     string
	}{
		{"a burst: every spin", 0, "cmcmcm", "cmcmcm"},
		{"gives up after spinGiveUp misses", 0, strings.Repeat("m", spinGiveUp+2),
			strings.Repeat("m", spinGiveUp) + gaveUp + "m" + gaveUp + "m"},
		{"a caught probe spins again", 0, strings.Repeat("m", spinGiveUp) + "cmm",
			strings.Repeat("m", spinGiveUp) + gaveUp + "cmm"},
		{"one catch resets the count", 0, strings.Repeat("m", spinGiveUp-1) + "c" + strings.Repeat("m", spinGiveUp-1),
			strings.Repeat("m", spinGiveUp-1) + "c" + strings.Repeat("m", spinGiveUp-1)},
		{"--spin N never gives up", 64, strings.Repeat("m", 2*spinGiveUp), strings.Repeat("m", 2*spinGiveUp)},
		{"never", -1, "", "....."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpinner(tc.spin)
			var got strings.Builder
			outcomes := tc.outcomes
			for got.Len() < len(tc.want) {
				if !s.start() {
					got.WriteByte('.')
					continue
				}
				o := outcomes[0]
				outcomes = outcomes[1:]
				got.WriteByte(o)
				if o == 'c' {
					s.caught()
				} else {
					s.missed()
				}
			}
			if got.String() != tc.want {
				t.Fatalf("dry spells:\n got %s\nwant %s", got.String(), tc.want)
			}
		})
	}
}

// TestSpinnerRounds: a worker makes this many empty rounds in all before
// it sleeps: 64 by default, N with --spin N, and with no spin only the
// round that found the rings dry; with --spin busy it never stops.
func TestSpinnerRounds(t *testing.T) {
	for _, tc := range []struct{ spin, empty int }{{0, defaultSpinRounds}, {8, 8}, {-1, 1}} {
		s := newSpinner(tc.spin)
		empty := 1
		for s.more(empty) {
			empty++
		}
		if empty != tc.empty {
			t.Errorf("spin %d: %d empty rounds before sleeping, want %d", tc.spin, empty, tc.empty)
		}
	}
	// SpinBusy: more rounds than a worker makes in a century at 10 ns a
	// round, with no giving up, and no reply window (it never sleeps).
	s := newSpinner(SpinBusy)
	for range 2 * spinGiveUp {
		s.missed()
	}
	if !s.start() || !s.more(1<<62) || s.adapts() {
		t.Errorf("--spin busy: start %v, more after 2^62 rounds %v, adapts %v; want true, true, false", s.start(), s.more(1<<62), s.adapts())
	}
}

// TestReplyWindow plays dry spells through the default spinner's reply
// window: each spell is its length and whether it ended with a turn (a
// packet from a link the worker had just sent on). Request/response
// traffic earns a window that catches the replies; a one-way stream, or
// replies slower than replyMax, earn none.
func TestReplyWindow(t *testing.T) {
	const us = int64(time.Microsecond)
	type spell struct {
		gap    int64
		turned bool
	}
	repeat := func(n int, s ...spell) []spell {
		var out []spell
		for range n {
			out = append(out, s...)
		}
		return out
	}
	for _, tc := range []struct {
		name             string
		spells           []spell
		wantMin, wantMax int64 // the window after them
	}{
		{"no spell yet", nil, 0, 0},
		{"request/response at 500/s: replies in 60 µs", repeat(8, spell{60 * us, true}, spell{2000 * us, true}), 60 * us, 80 * us},
		{"a one-way stream at 20k/s", repeat(16, spell{45 * us, false}), 0, 0},
		{"replies slower than replyMax", repeat(16, spell{400 * us, true}), 0, 0},
		{"a few quick turns among many slow ones", append(repeat(12, spell{3000 * us, true}), repeat(4, spell{50 * us, true})...), 0, 0},
		{"a stream that starts answering", append(repeat(16, spell{45 * us, false}), repeat(6, spell{30 * us, true})...), 30 * us, 40 * us},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpinner(0)
			now := int64(1)
			for _, sp := range tc.spells {
				s.dry(now)
				now += sp.gap
				s.ended(sp.gap, sp.turned)
			}
			if w := s.reply.window; w < tc.wantMin || w > tc.wantMax {
				t.Errorf("window %v, want %v..%v", time.Duration(w), time.Duration(tc.wantMin), time.Duration(tc.wantMax))
			}
		})
	}
	for _, spin := range []int{64, -1} {
		s := newSpinner(spin)
		for range 16 {
			s.ended(60*us, true)
		}
		if until := s.dry(100); until != 100 {
			t.Errorf("--spin %d: a dry spell polls until %d, want none past its rounds", spin, until)
		}
	}
}

// TestReplyWindowBudget: however often spells that would use the window
// come, the windows polled take at most 1/replyShare of the worker's time
// (plus the budget saved at start).
func TestReplyWindowBudget(t *testing.T) {
	const us = int64(time.Microsecond)
	s := newSpinner(0)
	now := int64(1)
	start, polled := now, int64(0)
	for range 10000 {
		// Turns 150 µs apart: each would be caught by a window of 187 µs,
		// which polls all the time.
		until := s.dry(now)
		polled += min(until-now, 150*us)
		now += 150 * us
		s.ended(150*us, true)
	}
	if w := s.reply.window; w < 150*us {
		t.Fatalf("window %v, want one that catches turns 150 µs apart", time.Duration(w))
	}
	if limit := (now-start)/replyShare + replyBudgetMax; polled > limit {
		t.Errorf("polled %v of %v, more than 1/%d of it plus the budget cap", time.Duration(polled), time.Duration(now-start), replyShare)
	}
	if polled < (now-start)/(2*replyShare) {
		t.Errorf("polled %v of %v: the budget of 1/%d went unspent", time.Duration(polled), time.Duration(now-start), replyShare)
	}
}

// TestWarnBusyShare: busy workers (--spin busy) that outnumber the CPUs
// they may run on are warned of at start; others are not.
func TestWarnBusyShare(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		plan Plan
		warn bool
	}{
		{"two busy workers on one CPU", Plan{Spin: SpinBusy, Queues: 2, CPUs: []int{1, 1}}, true},
		{"two busy workers on two CPUs", Plan{Spin: SpinBusy, Queues: 2, CPUs: []int{0, 1}}, false},
		{"unpinned, one more than the CPUs", Plan{Spin: SpinBusy, Queues: set.Count() + 1}, true},
		{"unpinned, as many as the CPUs", Plan{Spin: SpinBusy, Queues: set.Count()}, false},
		{"auto sleeps: no warning", Plan{Queues: 4, CPUs: []int{0}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log strings.Builder
			tc.plan.Logger = slog.New(slog.NewTextHandler(&log, nil))
			warnBusyShare(&tc.plan)
			if got := strings.Contains(log.String(), "spin busy: more workers than CPUs"); got != tc.warn {
				t.Errorf("warned %v, want %v: %q", got, tc.warn, log.String())
			}
		})
	}
}
