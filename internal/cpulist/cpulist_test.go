package cpulist_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/cpulist"
)

func TestParseFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		cpus []int
		out  string // Format of the sorted, deduplicated CPUs
	}{
		{"0", []int{0}, "0"},
		{"1,3", []int{1, 3}, "1,3"},
		{"0-3,8", []int{0, 1, 2, 3, 8}, "0-3,8"},
		{"2,0", []int{2, 0}, "0,2"},
		{"8,0-1,1\n", []int{8, 0, 1, 1}, "0-1,8"},
		{" 1 , 3 ,5-6", []int{1, 3, 5, 6}, "1,3,5-6"},
	} {
		cpus, err := cpulist.Parse(tc.in)
		if err != nil || !slices.Equal(cpus, tc.cpus) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, cpus, err, tc.cpus)
			continue
		}
		if got := cpulist.Format(slices.Compact(slices.Sorted(slices.Values(cpus)))); got != tc.out {
			t.Errorf("Format(%v) = %q, want %q", cpus, got, tc.out)
		}
	}
	for _, bad := range []string{"", " ", "x", "3-1", "1-", "-1", "0,,1", fmt.Sprint(cpulist.MaxCPU + 1), "0-99999"} {
		if cpus, err := cpulist.Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v: no error", bad, cpus)
		}
	}
	if got := cpulist.Format(nil); got != "none" {
		t.Errorf("Format(nil) = %q, want none", got)
	}
}

func ExampleParse() {
	cpus, _ := cpulist.Parse("0-2,8")
	fmt.Println(cpus, cpulist.Format(cpus))
	// Output: [0 1 2 8] 0-2,8
}
