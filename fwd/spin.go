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
	// window long enough to catch the replies to what was forwarded;
	// next wakes it in time for new work that comes at a steady
	// interval.
	reply replyWindow
	next  cadence
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

// ended records a dry spell of gap ns ended at now by a packet; turned:
// one from a link the worker sent on just before. It reports whether the
// packet was new work caught in the window it was due in.
func (s *spinner) ended(now, gap int64, turned bool) (caught bool) {
	if !s.adapts() {
		return false
	}
	s.reply.end(gap, turned)
	if gap <= replyMax {
		return false
	}
	return s.next.arrived(now)
}

// expect is what a worker whose rings stay dry at now, past its spin and
// reply window, does for the next arrival (cadence.expect): poll, sleep
// wait ns, or, neither, sleep until a packet comes.
func (s *spinner) expect(now int64) (poll bool, wait int64) {
	if !s.adapts() {
		return false, 0
	}
	return s.next.expect(now)
}

// moved records n packets forwarded by a round.
func (s *spinner) moved(n int) { s.next.packets += n }

// woke records a timed sleep (expect's wait) meant to end at due that
// ended at now.
func (s *spinner) woke(due, now int64) { s.next.woke(due, now) }

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

// cadence predicts when new work comes at low rates: a client that asks
// every 2 ms, a heartbeat, a media stream. Its packet finds the worker
// asleep and pays a wake-up (tens of µs on a virtual CPU) that a
// busy-polling forwarder never pays; the reply window (replyWindow) only
// catches what answers the worker's own forwarding. An arrival is a
// packet ending a dry spell longer than any reply window (a request,
// whichever link its answer went out on). When the recent arrivals came
// at a steady interval, each with few packets, the worker sleeps until
// just before the next is due, early by what its timed wake-ups ran
// late, and polls through the spread of the recent intervals, within
// 1/cadenceShare of its time. Irregular arrivals, intervals shorter than
// cadenceMin (where the short spin and the reply window already poll
// most of the time), and bursts earn no window.
//
// Only its worker uses it.
type cadence struct {
	// gaps are the recent intervals between arrivals (ns), 0 for none
	// yet or longer than cadenceMax; next is the oldest.
	gaps [cadenceSpells]int64
	next int
	// packets counts what the worker forwarded since the last arrival.
	packets int
	// last is when new work last arrived (monotonic ns, 0: never); lo
	// and hi (ns after last) bound when the next is due, hi 0: no
	// window.
	last, lo, hi int64
	// lead is how long before lo a timed sleep ends: the recent
	// lateness of the worker's timed wake-ups (an average, ns).
	lead int64
	// budget (ns) is the polling left to spend on windows, refilled at
	// 1/cadenceShare of the time since refilled; since is when the
	// current window's polling began (0: not polling).
	budget, refilled, since int64
}

const (
	// cadenceSpells is how many intervals a window is chosen from.
	cadenceSpells = 16
	// cadencePackets is the most packets an interval may carry: new
	// work whose wake-up is a large part of its cost (a request and its
	// answer, a heartbeat), not bursts of a paced stream, over which a
	// wake-up is spread and a poll's cost is not (as drivers' adaptive
	// interrupt moderation tells latency from bulk traffic).
	cadencePackets = 8
	// cadenceMin and cadenceMax bound the intervals a window is
	// predicted for: above 3,300 arrivals/s the spin and the reply
	// window poll; below 50/s a wake-up is a small part of the wait.
	cadenceMin = int64(300 * time.Microsecond)
	cadenceMax = int64(20 * time.Millisecond)
	// cadenceShare: windows take at most 1/cadenceShare of a worker's
	// time; cadenceBudgetMax caps the budget saved while idle.
	cadenceShare     = 5
	cadenceBudgetMax = int64(4 * time.Millisecond)
	// cadenceLeadMin is the least a timed sleep ends early; cadenceSlack
	// how long a window polls past the latest recent arrival.
	cadenceLeadMin = int64(10 * time.Microsecond)
	cadenceSlack   = int64(20 * time.Microsecond)
)

// arrived records new work arriving at now, charges what its window
// polled, and reports whether it came while the window was polled.
func (c *cadence) arrived(now int64) (caught bool) {
	caught = c.since != 0
	c.charge(now)
	c.refill(now)
	if c.last != 0 {
		gap := now - c.last
		if gap > cadenceMax || c.packets > cadencePackets {
			gap = 0
		}
		c.gaps[c.next] = gap
		c.next = (c.next + 1) % cadenceSpells
	}
	c.last, c.packets = now, 0
	c.lo, c.hi = c.choose()
	return caught
}

// choose is the window the recent intervals ask for, after the last
// arrival: the narrowest span holding three quarters of them, plus
// cadenceSlack; none while any is missing (or carried a burst), the span
// starts under cadenceMin, or it is wider than a quarter of its start.
// Three quarters, not all: a sender's timer late now and then (Go's
// sleeps drift across a millisecond's grid), or a packet its worker saw
// late, makes one interval long and the next short, and a window that
// waited for every interval to agree would seldom open.
func (c *cadence) choose() (lo, hi int64) {
	sorted := c.gaps
	slices.Sort(sorted[:])
	if sorted[0] == 0 {
		return 0, 0
	}
	const most = cadenceSpells * 3 / 4
	lo, hi = sorted[0], sorted[most-1]
	for i := 1; i+most <= cadenceSpells; i++ {
		if sorted[i+most-1]-sorted[i] < hi-lo {
			lo, hi = sorted[i], sorted[i+most-1]
		}
	}
	if lo < cadenceMin || hi-lo > lo/4 {
		return 0, 0
	}
	return lo, hi + cadenceSlack
}

// expect is what a worker whose rings are dry at now does for the next
// arrival: poll (now is within the window, and the budget pays for the
// window), or sleep until the window opens (wait > 0), or neither (no
// window, or it has passed).
func (c *cadence) expect(now int64) (poll bool, wait int64) {
	if c.hi == 0 {
		return false, 0
	}
	from, to := c.last+c.lo-max(c.lead, cadenceLeadMin), c.last+c.hi
	switch {
	case now >= to:
		c.charge(to)
		return false, 0
	case now >= from:
		if c.since == 0 {
			c.refill(now)
			if c.budget < to-now {
				return false, 0
			}
			c.since = now
		}
		return true, 0
	}
	return false, from - now
}

// woke records a timed sleep meant to end at due that ended at now.
func (c *cadence) woke(due, now int64) {
	if late := now - due; late >= 0 && late < cadenceMin {
		c.lead += (late - c.lead) / 8
	}
}

// charge ends a window's polling at now, taking it from the budget.
func (c *cadence) charge(now int64) {
	if c.since != 0 {
		c.budget -= max(0, now-c.since)
		c.since = 0
	}
	c.hi = 0
}

// refill adds the budget earned since it was last refilled.
func (c *cadence) refill(now int64) {
	if c.refilled != 0 {
		c.budget = min(c.budget+(now-c.refilled)/cadenceShare, cadenceBudgetMax)
	}
	c.refilled = now
}
