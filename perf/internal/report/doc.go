// Package report owns what a perf run leaves behind: results.json (the
// Results type: every sample, the machine, the settings), and everything
// rendered from it alone — results.md and the Markdown sections of
// perf/README.md, the short brief a run prints, bench.txt for benchstat,
// the PNG charts, and the iommu workload's table and chart.
//
// It never measures, starts a process or touches the network: a run fills
// in Results, and rendering the same Results (or results.json read back
// with LoadResults) gives the same files, byte for byte.
package report
