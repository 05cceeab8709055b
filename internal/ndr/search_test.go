package ndr

import (
	"errors"
	"testing"
)

// record is a caller's trial record: the outcome and what else the caller
// measured (here the trial's number), which the results must carry.
type record struct {
	o Outcome
	N int
}

func (r record) Outcome() Outcome { return r.o }

// model is a DUT that forwards up to capacity pps and loses the excess,
// behind a generator that offers at most genMax pps and, above reach (if
// set), falls short of its target. With noise, every fourth trial (shifted
// by phase) loses 3 % whatever the rate, as another load on the machine
// would make it.
type model struct {
	capacity, genMax, reach float64
	noise                   bool
	phase                   int
	trials                  int
}

func (m *model) trial(rate float64) (record, error) {
	m.trials++
	offered := rate
	if rate == 0 || rate > m.genMax {
		offered = m.genMax
	}
	o := Outcome{Target: rate, Offered: offered, Underrun: m.reach > 0 && rate > m.reach}
	if offered > m.capacity {
		o.Loss = (offered - m.capacity) / offered
	}
	if m.noise && (m.trials+m.phase)%4 == 0 {
		o.Loss = 0.03
	}
	return record{o, m.trials}, nil
}

// TestSearch: against a model DUT the search lands at or below the true
// rate and within twice its precision of the search's top below it, in no
// more than the trials allowed; its best trial is one the model made
// that passed (none when no rate passed: "bounded" runs out of trials
// above the capacity).
func TestSearch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       model
		hi      float64 // 0: the unpaced trial's, which is then a prior
		maxLoss float64
		p       Params
		want    float64 // the true answer
		margin  float64 // below want, as a fraction of hi; 0: 2·p.Precision
		trials  int     // exactly this many trials; 0: at most p.MaxTrials·max(p.Repeats,1)
	}{
		{name: "ndr/dut-limited", m: model{capacity: 370e3, genMax: 1e6}, p: Params{MaxTrials: 20, Precision: 0.01}, want: 370e3},
		{name: "ndr/generator-limited", m: model{capacity: 5e6, genMax: 1e6}, p: Params{MaxTrials: 20, Precision: 0.01}, want: 1e6},
		{name: "ndr/low", m: model{capacity: 10e3, genMax: 2e6}, p: Params{MaxTrials: 20, Precision: 0.01}, want: 10e3},
		{name: "pdr/dut-limited", m: model{capacity: 370e3, genMax: 1e6}, maxLoss: 0.005, p: Params{MaxTrials: 20, Precision: 0.01}, want: 370e3 / 0.995},
		{name: "pdr/low", m: model{capacity: 10e3, genMax: 2e6}, maxLoss: 0.005, p: Params{MaxTrials: 20, Precision: 0.01}, want: 10e3 / 0.995},
		// A loss burst in one trial of three does not fail a rate.
		{name: "noisy/0", m: model{capacity: 200e3, genMax: 1e6, noise: true}, hi: 1e6, p: Params{MaxTrials: 40, Precision: 0.02, Repeats: 3}, want: 200e3},
		{name: "noisy/1", m: model{capacity: 200e3, genMax: 1e6, noise: true, phase: 1}, hi: 1e6, p: Params{MaxTrials: 40, Precision: 0.02, Repeats: 3}, want: 200e3},
		{name: "noisy/2", m: model{capacity: 200e3, genMax: 1e6, noise: true, phase: 2}, hi: 1e6, p: Params{MaxTrials: 40, Precision: 0.02, Repeats: 3}, want: 200e3},
		// A generator short of its target fails the rate, lossless or not.
		{name: "underrun", m: model{capacity: 200e3, genMax: 1e6, reach: 150e3}, hi: 300e3, p: Params{MaxTrials: 20, Precision: 0.01, Repeats: 3}, want: 150e3, margin: 5e3 / 300e3},
		// It stops at its trial count, however fine its precision.
		{name: "bounded", m: model{capacity: 123456, genMax: 1e7}, hi: 1e7, p: Params{MaxTrials: 3, Precision: 1e-9}, want: 123456, margin: 1, trials: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			hi, prior := tc.hi, []record(nil)
			if hi == 0 {
				max, _ := m.trial(0)
				hi, prior = max.o.Offered, []record{max}
			}
			made := func() int { return m.trials - len(prior) }
			res, err := Search(m.trial, 0, hi, tc.maxLoss, tc.p, prior...)
			if err != nil {
				t.Fatal(err)
			}
			margin := tc.margin
			if margin == 0 {
				margin = 2 * tc.p.Precision
			}
			if res.Rate > tc.want+1 || res.Rate < tc.want-margin*hi {
				t.Errorf("rate %.0f, want %.0f (−%.0f)", res.Rate, tc.want, margin*hi)
			}
			if tc.trials > 0 && made() != tc.trials || made() > tc.p.MaxTrials*max(tc.p.Repeats, 1) {
				t.Errorf("%d trials, allowed %d rates of %d", made(), tc.p.MaxTrials, max(tc.p.Repeats, 1))
			}
			if len(res.Trials) != made() {
				t.Errorf("%d trials recorded, %d made", len(res.Trials), made())
			}
			// The best trial is one the model made, and it passed.
			switch b := res.Best; {
			case b == nil && res.Rate != 0:
				t.Errorf("rate %.0f without a best trial", res.Rate)
			case b != nil && (b.o.Offered != res.Rate || b.o.Loss > tc.maxLoss || b.o.Underrun || b.N < 1 || b.N > m.trials):
				t.Errorf("best trial %+v for rate %.0f", *b, res.Rate)
			}
			t.Logf("rate %.0f in %d trials", res.Rate, made())
		})
	}
}

// TestSearchPrior: a search given another's trials (the PDR search the
// NDR search's) starts from their bounds: a passing prior trial at the
// top ends it without a trial of its own; failing ones lower the top.
func TestSearchPrior(t *testing.T) {
	m := model{capacity: 370e3, genMax: 1e6}
	p := Params{MaxTrials: 20, Precision: 0.01}
	max, _ := m.trial(0)
	ndr, err := Search(m.trial, 0, max.o.Offered, 0, p, max)
	if err != nil {
		t.Fatal(err)
	}
	before := m.trials
	pdr, err := Search(m.trial, 0, max.o.Offered, 0.005, p, append([]record{max}, ndr.Trials...)...)
	if err != nil {
		t.Fatal(err)
	}
	if pdr.Rate < ndr.Rate {
		t.Errorf("PDR %.0f below the NDR %.0f its priors include", pdr.Rate, ndr.Rate)
	}
	for _, r := range pdr.Trials {
		if r.N <= before {
			t.Errorf("PDR search repeated prior trial %d", r.N)
		}
		if r.o.Target == max.o.Offered {
			t.Errorf("PDR search tried the top %.0f, which a prior trial failed", max.o.Offered)
		}
	}

	// Every prior trial passed: the top is the answer, no trial made.
	m = model{capacity: 5e6, genMax: 1e6}
	top, _ := m.trial(0)
	res, err := Search(m.trial, 0, top.o.Offered, 0, p, top)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rate != top.o.Offered || len(res.Trials) != 0 || res.Best == nil || res.Best.N != top.N {
		t.Errorf("rate %.0f in %d trials, best %+v; want the prior's %.0f in none", res.Rate, len(res.Trials), res.Best, top.o.Offered)
	}
}

// TestSearchError: a trial's error ends the search, returned as it is,
// with the trials made before it.
func TestSearchError(t *testing.T) {
	errDown := errors.New("link down")
	m := model{capacity: 370e3, genMax: 1e6}
	trial := func(rate float64) (record, error) {
		if m.trials == 2 {
			return record{}, errDown
		}
		return m.trial(rate)
	}
	res, err := Search(trial, 0, 1e6, 0, Params{MaxTrials: 20, Precision: 0.01})
	if !errors.Is(err, errDown) || len(res.Trials) != 2 {
		t.Fatalf("err %v after %d trials; want %v after 2", err, len(res.Trials), errDown)
	}
	_, err = Verify(trial, Result[record]{Rate: 1e5}, 0, 3, 1e3, 4)
	if !errors.Is(err, errDown) {
		t.Fatalf("Verify: err %v, want %v", err, errDown)
	}
}

// TestVerify: an NDR found by majority, or by one lucky trial, is
// confirmed by n trials in a row, lowered by a step per failure until
// they all pass; a rate that passes stays (its slowest trial's offered
// rate), and one that never passes within the steps is reported
// unverified. A generator short of its target fails the rate.
func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name     string
		m        model
		found    float64 // the search's NDR
		n, steps int
		want     float64
		verified bool
		trials   int
	}{
		// Every trial above capacity+1 pps loses.
		{"holds", model{capacity: 200e3 + 1, genMax: 1e6}, 190e3, 3, 4, 190e3, true, 3},
		{"lucky-high", model{capacity: 200e3 + 1, genMax: 1e6}, 215e3, 3, 8, 200e3, true, 6}, // 215, 210, 205 fail at once; 200 passes 3
		{"too-few-steps", model{capacity: 200e3 + 1, genMax: 1e6}, 260e3, 3, 2, 250e3, false, 3},
		{"underrun", model{capacity: 200e3, genMax: 1e6, reach: 150e3}, 160e3, 3, 4, 150e3, true, 5},
		{"none", model{capacity: 200e3, genMax: 1e6}, 190e3, 0, 4, 190e3, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			res, err := Verify(m.trial, Result[record]{Rate: tc.found}, 0, tc.n, 5e3, tc.steps)
			if err != nil {
				t.Fatal(err)
			}
			if res.Rate != tc.want || res.Verified != tc.verified || len(res.VerifyTrials) != tc.trials || m.trials != tc.trials {
				t.Fatalf("rate %.0f verified %v in %d trials (%d made); want %.0f, %v, %d", res.Rate, res.Verified, len(res.VerifyTrials), m.trials, tc.want, tc.verified, tc.trials)
			}
			if tc.verified && (res.Best == nil || res.Best.o.Offered != res.Rate || res.Best.o.Loss != 0) {
				t.Fatalf("verified at %.0f with best trial %+v", res.Rate, res.Best)
			}
		})
	}
}
