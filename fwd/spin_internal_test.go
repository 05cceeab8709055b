package fwd

import (
	"cmp"
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
				s.ended(now, sp.gap, sp.turned)
			}
			if w := s.reply.window; w < tc.wantMin || w > tc.wantMax {
				t.Errorf("window %v, want %v..%v", time.Duration(w), time.Duration(tc.wantMin), time.Duration(tc.wantMax))
			}
		})
	}
	for _, spin := range []int{64, -1} {
		s := newSpinner(spin)
		for range 16 {
			s.ended(100, 60*us, true)
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
		s.ended(now, 150*us, true)
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

// TestCadence plays arrivals of new work through the default spinner's
// cadence: steady intervals (jitter within a quarter, one outlier each
// side forgiven) earn a window around the next arrival; a flood,
// irregular arrivals, too few, or arrivals further apart than cadenceMax
// earn none.
func TestCadence(t *testing.T) {
	const us = int64(time.Microsecond)
	steady := func(n int, every, jitter int64) []int64 {
		var out []int64
		for i := range n {
			out = append(out, every+jitter*int64(i%5-2)/2) // -jitter..+jitter
		}
		return out
	}
	for _, tc := range []struct {
		name         string
		gaps         []int64
		packets      int      // forwarded in each interval (0: 2, a request and its answer)
		wantLo       [2]int64 // bounds of the window's start after the last arrival; 0, 0: no window
		wantHiAtMost int64
	}{
		{"requests every 2 ms, ±40 µs", steady(20, 2000*us, 40*us), 0, [2]int64{1960 * us, 1980 * us}, 2060 * us},
		{"bursts of 16 every 2 ms", steady(20, 2000*us, 0), 16, [2]int64{}, 0},
		{"a few late among steady ones", append(steady(16, 2000*us, 0), 5000*us, 900*us, 2000*us, 4000*us), 0, [2]int64{2000 * us, 2000 * us}, 2030 * us},
		{"too few yet", steady(cadenceSpells-1, 2000*us, 0), 0, [2]int64{}, 0},
		{"new work at 20k/s", steady(40, 50*us, 0), 0, [2]int64{}, 0},
		{"irregular: 0.5 to 4.5 ms", []int64{500 * us, 4500 * us, 1000 * us, 3000 * us, 2000 * us, 700 * us, 3900 * us, 1500 * us,
			2500 * us, 600 * us, 4000 * us, 1200 * us, 3300 * us, 900 * us, 2800 * us, 1800 * us, 3600 * us}, 0, [2]int64{}, 0},
		{"every 50 ms", steady(20, 50_000*us, 0), 0, [2]int64{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpinner(0)
			now := int64(1_000_000_000)
			s.ended(now, 0, false)
			for _, g := range tc.gaps {
				s.moved(cmp.Or(tc.packets, 2))
				now += g
				s.ended(now, g, false)
			}
			c := &s.next
			if c.lo < tc.wantLo[0] || c.lo > tc.wantLo[1] || c.hi > tc.wantHiAtMost || (tc.wantLo[0] > 0) != (c.hi > 0) {
				t.Errorf("window %v..%v after the last arrival, want its start in %v..%v and its end at most %v",
					time.Duration(c.lo), time.Duration(c.hi), time.Duration(tc.wantLo[0]), time.Duration(tc.wantLo[1]), time.Duration(tc.wantHiAtMost))
			}
		})
	}
	// Turns (answers to what the worker sent) are not new work.
	s := newSpinner(0)
	for i := range int64(40) {
		s.ended(i*2000*us, 60*us, true)
	}
	if s.next.hi != 0 || s.next.last != 0 {
		t.Errorf("answers every 2 ms earned a window %v..%v", time.Duration(s.next.lo), time.Duration(s.next.hi))
	}
	// --spin N, off and busy never predict.
	for _, spin := range []int{64, -1, SpinBusy} {
		s := newSpinner(spin)
		for i := range int64(40) {
			s.ended(i*2000*us, 2000*us, false)
		}
		if poll, wait := s.expect(41 * 2000 * us); poll || wait != 0 {
			t.Errorf("--spin %d: expect polls %v, waits %v; want neither", spin, poll, wait)
		}
	}
}

// TestCadenceExpect follows a worker through requests every 2 ms: after
// an arrival it sleeps until the next window opens, early by what its
// timed wake-ups ran late, polls through the window, and, however often
// windows come, polls at most 1/cadenceShare of its time (plus the
// budget saved).
func TestCadenceExpect(t *testing.T) {
	const us = int64(time.Microsecond)
	s := newSpinner(0)
	now := int64(1_000_000_000)
	for range cadenceSpells + 2 {
		s.ended(now, 1900*us, false)
		now += 2000 * us
	}
	last := now - 2000*us
	for range 16 { // timed wake-ups 30 µs late
		s.woke(0, 30*us)
	}
	if lead := s.next.lead; lead < 20*us || lead > 30*us {
		t.Fatalf("lead %v after wake-ups 30 µs late, want about 30 µs", time.Duration(lead))
	}
	at := last + 100*us
	poll, wait := s.expect(at)
	if from := last + 2000*us - s.next.lead; poll || at+wait != from {
		t.Fatalf("100 µs after an arrival: poll %v, wait until %v after it; want a sleep until %v after it",
			poll, time.Duration(at+wait-last), time.Duration(from-last))
	}
	if poll, _ := s.expect(last + 1990*us); !poll {
		t.Fatal("10 µs before the next is due: no poll")
	}
	if poll, wait := s.expect(last + 2030*us); poll || wait != 0 {
		t.Errorf("past the window: poll %v, wait %v; want neither until the next arrival", poll, wait)
	}

	// Budget: windows of 150 µs asked for every 300 µs (half the time).
	s = newSpinner(0)
	now = 1_000_000_000
	start, polled := now, int64(0)
	for i := range 20000 {
		s.ended(now, 300*us, false)
		if i < cadenceSpells+1 {
			now += 300 * us
			continue
		}
		c := &s.next
		c.lo, c.hi = 150*us, 300*us // as though the arrivals spread so
		for t := now + 150*us - cadenceLeadMin; t < now+300*us; t += 10 * us {
			if poll, _ := s.expect(t); poll {
				polled += 10 * us
			}
		}
		now += 300 * us
	}
	if limit := (now-start)/cadenceShare + cadenceBudgetMax; polled > limit {
		t.Errorf("polled %v of %v, more than 1/%d of it plus the budget cap", time.Duration(polled), time.Duration(now-start), cadenceShare)
	}
	if polled < (now-start)/(2*cadenceShare) {
		t.Errorf("polled %v of %v: the budget of 1/%d went unspent", time.Duration(polled), time.Duration(now-start), cadenceShare)
	}
}
