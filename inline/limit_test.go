package inline

import (
	"testing"

	"github.com/xdpfwd/xdpfwd/umem"
)

// TestResolveMax: every inline limit setting, as the library, the flags
// and a reload give it, stands for one byte limit.
func TestResolveMax(t *testing.T) {
	for _, tc := range []struct {
		setting, want int
		err           bool
	}{
		{0, umem.InlineSlotSize, false}, // the default
		{Off, 0, false},
		{1, 1, false},
		{128, 128, false},
		{umem.InlineSlotSize, umem.InlineSlotSize, false},
		{umem.InlineSlotSize + 1, 0, true},
		{-2, 0, true},
	} {
		got, err := ResolveMax(tc.setting)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ResolveMax(%d) = %d, %v; want %d, error %v", tc.setting, got, err, tc.want, tc.err)
		}
	}
}
