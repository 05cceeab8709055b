package fwd

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
}

const (
	// defaultSpinRounds is a spin's length unless --spin says (about
	// 5 µs of empty rounds on the machine of issue 11).
	defaultSpinRounds = 64
	// spinGiveUp is how many spins in a row must catch nothing before
	// the worker sleeps at once.
	spinGiveUp = 16
	// spinProbe: while giving up, one dry spell in this many spins.
	spinProbe = 16
)

// newSpinner is the spinner of Config.Spin: 0 adapts, positive spins that
// many rounds every time, negative never spins.
func newSpinner(spin int) spinner {
	switch {
	case spin == 0:
		return spinner{rounds: defaultSpinRounds}
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

// caught records a spin that found a packet; missed one that ran out.
func (s *spinner) caught() { s.misses, s.probe = 0, 0 }
func (s *spinner) missed() { s.misses = min(s.misses+1, spinGiveUp) }
