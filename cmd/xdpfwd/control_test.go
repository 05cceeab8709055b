package main

import (
	"slices"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// TestControlWorkerCPUs: link list's CPUs are those the workers run on
// (worker q on CPUs[q % len]): all of --cpus when there are as many
// workers or more, the first ones when fewer, none when not pinned.
func TestControlWorkerCPUs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queues int
		cpus   []int
		want   []int
	}{
		{"not pinned", 2, nil, nil},
		{"one on one", 1, []int{1}, []int{1}},
		{"two on one", 2, []int{1}, []int{1}},
		{"one of two", 1, []int{3, 1}, []int{3}},
		{"two of three, unordered", 2, []int{5, 2, 0}, []int{2, 5}},
		{"more workers than CPUs", 4, []int{1, 0}, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := workerCPUs(fwd.Plan{Queues: tc.queues, CPUs: tc.cpus}); !slices.Equal(got, tc.want) {
				t.Errorf("workerCPUs(queues %d, CPUs %v) = %v, want %v", tc.queues, tc.cpus, got, tc.want)
			}
		})
	}
}
