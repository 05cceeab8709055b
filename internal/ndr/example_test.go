package ndr_test

import (
	"fmt"

	"github.com/xdpfwd/xdpfwd/internal/ndr"
)

// A DUT that forwards 250,000 packets/s and drops the excess, behind a
// generator that sends up to a million: the trial function computes what
// a real one would measure.
func Example() {
	trial := func(rate float64) (ndr.Outcome, error) {
		o := ndr.Outcome{Target: rate, Offered: rate}
		if rate > 250e3 {
			o.Loss = (rate - 250e3) / rate
		}
		return o, nil
	}
	res, err := ndr.Search(trial, 0, 1e6, 0, ndr.Params{MaxTrials: 12, Precision: 0.01})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err = ndr.Verify(trial, res, 0, 3, 0.01*res.Rate, 8)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("NDR %.0f pps, verified %v, %d search trials\n", res.Rate, res.Verified, len(res.Trials))
	// Output: NDR 250000 pps, verified true, 10 search trials
}
