package ndr

// Verify confirms res.Rate: n trials at that rate must all lose at most
// maxLoss (a search decides by majority, and its best trial may be one
// lucky trial of several). On a failure the rate is lowered by step and
// verified again, at most maxSteps times. The rate reported is the
// lowest offered by the passing trials, so it is one each of them
// sustained; without a pass, the lowest rate tried, Verified false. n 0
// leaves res as it is.
func Verify[T Trial](trial func(rate float64) (T, error), res Result[T], maxLoss float64, n int, step float64, maxSteps int) (Result[T], error) {
	if n <= 0 || res.Rate <= 0 || step <= 0 {
		return res, nil
	}
	rate, tried := res.Rate, res.Rate
	for range maxSteps + 1 {
		if rate <= 0 {
			break
		}
		tried = rate
		var passed []T
		for len(passed) < n {
			t, err := trial(rate)
			if err != nil {
				return res, err
			}
			res.VerifyTrials = append(res.VerifyTrials, t)
			if !passes(t, maxLoss) {
				break
			}
			passed = append(passed, t)
		}
		if len(passed) == n {
			b := passed[0]
			for _, t := range passed[1:] {
				if t.Outcome().Offered < b.Outcome().Offered {
					b = t
				}
			}
			res.Rate, res.Best, res.Verified = b.Outcome().Offered, &b, true
			return res, nil
		}
		rate -= step
	}
	res.Rate, res.Best, res.Verified = tried, nil, false // the lowest tried, unconfirmed
	return res, nil
}
