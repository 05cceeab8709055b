// Brief: the few lines a run prints on standard output.

package report

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// Brief is what a run prints on standard output: where its files are and
// one line per workload, the reference contender's median of the headline
// metric and the range of the others' (results.md has the tables).
func (r *Results) Brief(dir string) string {
	var b strings.Builder
	n := 0
	for _, s := range r.Samples {
		if s.Error == "" {
			n++
		}
	}
	fmt.Fprintf(&b, "perf: %d samples in %s%s. Tables: %s; every sample: %s; charts: %s\n\n",
		n, FmtClock(secondsDuration(r.ElapsedS)), map[bool]string{true: " (interrupted)"}[r.Interrupted],
		filepath.Join(dir, "results.md"), filepath.Join(dir, "results.json"), filepath.Join(dir, "*.png"))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tunit\treference\tothers (median of each: lowest–highest)\tfailed")
	for _, w := range r.Workloads {
		ref := r.RefFor(w.Name)
		refCell := "—"
		if st, ok := r.Stat(ref, w.Name, w.Metric); ok {
			refCell = ref + " " + FmtMetric(st.Median, w.Metric)
		}
		var others []float64
		failed, any := 0, false
		for _, c := range r.Contenders {
			if st, ok := r.Stat(c.Name, w.Name, w.Metric); ok {
				any = true
				if c.Name != ref && !c.Baseline {
					others = append(others, st.Median)
				}
			}
		}
		for _, s := range r.Samples {
			if s.Workload == w.Name && s.Error != "" {
				failed++
				any = true
			}
		}
		if !any {
			continue
		}
		otherCell := "—"
		if len(others) > 0 {
			lo, hi := FmtMetric(slices.Min(others), w.Metric), FmtMetric(slices.Max(others), w.Metric)
			otherCell = fmt.Sprintf("%d: %s–%s", len(others), lo, hi)
			if lo == hi {
				otherCell = fmt.Sprintf("%d: %s", len(others), lo)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", w.Name, w.Unit, refCell, otherCell, failed)
	}
	tw.Flush()
	return b.String()
}
