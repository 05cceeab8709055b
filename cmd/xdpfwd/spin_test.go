package main

import (
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// TestParseSpin: --spin takes auto or 0 (fwd.Config's adaptive 0: a zero
// means the same in the flag as in the Config), off (never: -1), busy
// (never sleep: fwd.SpinBusy), or a count of empty rounds; anything else
// is refused.
func TestParseSpin(t *testing.T) {
	spin, _ := fwd.SettingNamed("spin")
	for _, tc := range []struct {
		in   string
		want int
		bad  bool
	}{
		{"auto", 0, false},
		{"", 0, false},
		{"off", -1, false},
		{"0", 0, false},
		{"64", 64, false},
		{"busy", fwd.SpinBusy, false},
		{"Busy", 0, true},
		{"-1", 0, true},
		{"fast", 0, true},
		{"1e3", 0, true},
		{"2000000", 0, true},
	} {
		var c fwd.Config
		err := spin.Set(&c, tc.in)
		if (err != nil) != tc.bad || err == nil && c.Spin != tc.want {
			t.Errorf("--spin %q: %d, %v; want %d, error %v", tc.in, c.Spin, err, tc.want, tc.bad)
		}
	}
}
