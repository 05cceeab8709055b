package ndr

// Outcome is what the search reads of a trial.
type Outcome struct {
	// Target is the rate asked for, per second; 0: unpaced, as fast as
	// the source goes.
	Target float64
	// Offered is the rate the trial offered.
	Offered float64
	// Loss is the fraction of what was offered that did not arrive.
	Loss float64
	// Underrun says the trial fell short of its target: it says nothing
	// of the target, and fails.
	Underrun bool
}

// Outcome makes an Outcome a Trial of its own, for callers that measure
// nothing else.
func (o Outcome) Outcome() Outcome { return o }

// Trial is the caller's record of one trial.
type Trial interface {
	Outcome() Outcome
}

// Params bound a search.
type Params struct {
	MaxTrials int     // most rates tried (each Repeats trials at most)
	Precision float64 // stop when hi-lo ≤ Precision·hi
	// Repeats is how many trials decide a rate, by majority (a trial
	// that agrees with the first half settles it early): a loss burst
	// that a shared machine causes in one trial does not fail the rate.
	// 0 and 1: one trial.
	Repeats int
}

// Result is a search's outcome: the highest rate that passed (its trial)
// and every trial made.
type Result[T Trial] struct {
	Rate   float64 `json:"rate_pps"` // offered rate of the best passing trial; 0 if none passed
	Best   *T      `json:"best,omitempty"`
	Trials []T     `json:"trials"`
	// Verified says Verify's trials at Rate all passed; VerifyTrials are
	// those trials, the failed ones at higher rates first.
	Verified     bool `json:"verified"`
	VerifyTrials []T  `json:"verify_trials,omitempty"`
}

// passes says whether a trial lost at most maxLoss and reached its target.
func passes(t Trial, maxLoss float64) bool {
	o := t.Outcome()
	return o.Loss <= maxLoss && !o.Underrun
}

// Search is a binary search for the highest rate in (lo, hi] whose trial
// loses at most maxLoss. Trials already made (prior, e.g. another
// search's) narrow the bounds first: a passing one raises lo, a failing one
// lowers hi; hi itself is tried first unless a prior trial failed there.
// Each rate is decided by the majority of p.Repeats trials (a rate that
// passes counts its passing trials, the best of them the result). It
// stops after p.MaxTrials rates or when the bounds are within p.Precision
// of hi. It is a pure function of trial's answers.
func Search[T Trial](trial func(rate float64) (T, error), lo, hi, maxLoss float64, p Params, prior ...T) (Result[T], error) {
	var res Result[T]
	consider := func(t T) {
		if !passes(t, maxLoss) {
			return
		}
		if o := t.Outcome(); res.Best == nil || o.Offered > (*res.Best).Outcome().Offered {
			b := t
			res.Best, res.Rate = &b, o.Offered
		}
	}
	need := max(p.Repeats, 1)/2 + 1 // agreeing trials that decide a rate
	// Prior trials decide their rates by the same majority: a rate whose
	// trials pass more often than not passes.
	type tally struct{ pass, fail int }
	votes := map[float64]*tally{}
	var rates []float64
	rateOf := func(o Outcome) float64 {
		if o.Target == 0 { // unpaced: as fast as it went
			return o.Offered
		}
		return o.Target
	}
	for _, t := range prior {
		rate := rateOf(t.Outcome())
		v := votes[rate]
		if v == nil {
			v = &tally{}
			votes[rate] = v
			rates = append(rates, rate)
		}
		if passes(t, maxLoss) {
			v.pass++
		} else {
			v.fail++
		}
	}
	hiFailed := false
	for _, rate := range rates {
		v := votes[rate]
		switch {
		case v.pass > v.fail:
			lo = max(lo, min(rate, hi))
			for _, t := range prior {
				if rateOf(t.Outcome()) == rate {
					consider(t)
				}
			}
		case rate <= hi:
			hi, hiFailed = rate, true
		}
	}
	steps := 0
	try := func(rate float64) (bool, error) {
		steps++
		var passed []T
		for fails := 0; len(passed) < need && fails < need; {
			t, err := trial(rate)
			if err != nil {
				return false, err
			}
			res.Trials = append(res.Trials, t)
			if passes(t, maxLoss) {
				passed = append(passed, t)
			} else {
				fails++
			}
		}
		if len(passed) < need {
			return false, nil
		}
		for _, t := range passed {
			consider(t)
		}
		return true, nil
	}
	if !hiFailed && lo < hi && p.MaxTrials > 0 {
		ok, err := try(hi)
		if err != nil || ok {
			return res, err
		}
	}
	for steps < p.MaxTrials && hi-lo > p.Precision*hi {
		mid := (lo + hi) / 2
		ok, err := try(mid)
		if err != nil {
			return res, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return res, nil
}
