package fwd

import (
	"runtime"
	"testing"
)

func TestSpareProc(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
	for _, c := range []struct {
		name           string
		env            string // GOMAXPROCS; "" unset
		procs, workers int
		want           int
	}{
		{"pinned to one CPU, one worker", "", 1, 1, 2},
		{"two CPUs, two workers", "", 2, 2, 3},
		{"already a spare P", "", 4, 2, 4},
		{"set by hand", "1", 1, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", c.env)
			runtime.GOMAXPROCS(c.procs)
			spareProc(c.workers)
			if got := runtime.GOMAXPROCS(0); got != c.want {
				t.Errorf("GOMAXPROCS %d after spareProc(%d) from %d, want %d", got, c.workers, c.procs, c.want)
			}
		})
	}
}
