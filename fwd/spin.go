package fwd

import (
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// spinner decides, each time a worker's rings run dry, whether it polls
// them for a while before it sleeps in poll(2) or sleeps at once. A spin
// that catches a packet saves a sleep and its wake-up; one that catches
// nothing costs its rounds. After spinGiveUp spins in a row caught
// nothing (a trickle: packets further apart than a spin), the worker
// sleeps at once, which also saves the TX kick (the poll makes it), and
// spins again every spinProbe-th time to notice when spinning pays again
// (a burst whose tail trickles in).
//
// Only its worker uses it.
type spinner struct {
	// rounds is the length of a spin in empty rounds; 0 or negative:
	// never spin.
	rounds int
	// fixed: always spin (--spin N), never give up.
	fixed bool
	// misses counts the spins in a row that caught nothing; probe the
	// dry spells since the last spin while giving up.
	misses, probe int
	// reply, in the default spinner (adapts), stretches a spin into a
	// window long enough to catch the replies to what was forwarded.
	reply replyWindow
}

// adapts reports whether this is the default spinner: not --spin N, not off.
func (s *spinner) adapts() bool { return !s.fixed && s.rounds > 0 }

const (
	// defaultSpinRounds is a spin's length unless --spin says (about
	// 5 µs of empty rounds on the machine perf/README.md measures on).
	defaultSpinRounds = 64
	// spinGiveUp is how many spins in a row must catch nothing before
	// the worker sleeps at once.
	spinGiveUp = 16
	// spinProbe: while giving up, one dry spell in this many spins.
	spinProbe = 16
)

// newSpinner is the spinner of Config.Spin: 0 adapts, positive spins that
// many rounds every time (SpinBusy: more than a worker ever makes, so it
// never sleeps), negative never spins.
func newSpinner(spin int) spinner {
	switch {
	case spin == 0:
		s := spinner{rounds: defaultSpinRounds}
		for i := range s.reply.gaps {
			s.reply.gaps[i] = replyNever
		}
		return s
	case spin > 0:
		return spinner{rounds: spin, fixed: true}
	}
	return spinner{}
}

// start reports whether to spin through the dry spell that begins now.
func (s *spinner) start() bool {
	if s.rounds <= 0 {
		return false
	}
	if s.fixed || s.misses < spinGiveUp {
		return true
	}
	s.probe++
	if s.probe < spinProbe {
		return false
	}
	s.probe = 0
	return true
}

// more reports whether a spin goes on into its idle-th empty round.
func (s *spinner) more(idle int) bool { return idle < s.rounds }

// dry returns until when a dry spell beginning at now polls past its
// spin's rounds: now when it does not (replyWindow.begin).
func (s *spinner) dry(now int64) int64 {
	if !s.adapts() {
		return now
	}
	return s.reply.begin(now)
}

// ended records a dry spell of gap ns ended by a packet; turned: one
// from a link the worker sent on just before.
func (s *spinner) ended(gap int64, turned bool) {
	if s.adapts() {
		s.reply.end(gap, turned)
	}
}

// caught records a spin that found a packet; missed one that ran out.
func (s *spinner) caught() { s.misses, s.probe = 0, 0 }
func (s *spinner) missed() { s.misses = min(s.misses+1, spinGiveUp) }

// replyWindow decides how long a worker keeps polling after its rings ran
// dry when what it forwards is answered: a request goes out on link B and
// its reply comes back on B some tens of microseconds later. A worker
// asleep by then pays a wake-up on the reply's way (about 40 µs on a
// virtual CPU woken from halt: as a trace showed), one a busy-polling
// forwarder never pays. So the default spinner watches how each dry spell
// ended: with a packet from a link the worker had just sent on (a turn),
// after how long. When a third of the recent spells were turns shorter
// than replyMax, it polls that long (plus a quarter) after each forward,
// within a CPU budget of replyShare of the worker's time: a one-way
// stream never turns, so its packets never buy a long poll, and a flood
// never runs dry.
//
// Only its worker uses it.
type replyWindow struct {
	// gaps are the recent spells' lengths (ns), replyNever for one that
	// did not end with a turn within replyMax; next is the oldest.
	gaps [replySpells]int64
	next int
	// window (ns) is how long the next dry spell polls; 0: not past the
	// short spin.
	window int64
	// budget (ns) is the polling left to spend on windows, refilled at
	// replyShare of the time since refilled.
	budget, refilled int64
	// polling: the current spell polls its window.
	polling bool
}

const (
	// replySpells is how many dry spells the window is chosen from.
	replySpells = 16
	// replyMax bounds a window: a reply later than this is left to
	// wake the worker.
	replyMax = int64(200 * time.Microsecond)
	// replyNever stands for a spell that bought no window.
	replyNever = int64(1) << 62
	// replyShare: windows take at most 1/replyShare of a worker's time.
	replyShare = 4
	// replyBudgetMax caps the budget saved while idle.
	replyBudgetMax = int64(2 * time.Millisecond)
)

// replyYieldRounds: a worker polling its reply window yields the CPU
// every this many rounds (a few µs), so that a thread that shares it
// runs: the answer may be on its way through that thread.
const replyYieldRounds = 16

// yield is sched_yield(2), raw: it does not block, and the Go runtime
// need not know (an entered syscall may cost the worker its P).
func yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// begin returns when a dry spell that begins at now polls until: now plus
// the window when the budget has it, else now (no long poll).
func (r *replyWindow) begin(now int64) int64 {
	r.budget = min(r.budget+(now-r.refilled)/replyShare, replyBudgetMax)
	r.refilled = now
	r.polling = r.window > 0 && r.budget >= r.window
	if !r.polling {
		return now
	}
	return now + r.window
}

// end records a dry spell of gap ns that ended with a packet, a turn or
// not, and charges what it polled of its window.
func (r *replyWindow) end(gap int64, turned bool) {
	if r.polling {
		r.budget -= min(gap, r.window)
	}
	if !turned || gap > replyMax {
		gap = replyNever
	}
	r.gaps[r.next] = gap
	r.next = (r.next + 1) % replySpells
	r.window = r.choose()
}

// choose is the window the recent spells ask for: the shortest that
// would have caught a third of them, with a quarter to spare; 0 when a
// third of them were no turns within replyMax.
func (r *replyWindow) choose() int64 {
	sorted := r.gaps
	slices.Sort(sorted[:])
	g := sorted[replySpells/3]
	if g == replyNever {
		return 0
	}
	return g + g/4
}
