package inline

import (
	"fmt"

	"github.com/xdpfwd/xdpfwd/umem"
)

// An inline limit is the largest packet, in bytes, copied whole into an
// inline slot. As a setting (SenderConfig.InlineMax, fwd.Config.InlineMax,
// fwd.Forwarder.SetInlineMax, xdpfwd's --inline-max) it takes one of:
//
//   - 1..umem.InlineSlotSize: that many bytes;
//   - 0: the default, the slot size, as a zero Go value is everywhere in
//     xdpfwd's configuration;
//   - Off: nothing is inlined; the inline path, and the UMEM's inline zone
//     if set at start, are off.
//
// Once resolved (ResolveMax, linearize.Policy.InlineMax, a forwarder's
// InlineBytes, the xdpfwd_inline_max_bytes gauge) it is a plain byte
// count, 0 when nothing is inlined. fwd.Plan.InlineMax and a forwarder's
// InlineMax, a setting resolved, keep the setting's values:
// 1..umem.InlineSlotSize or Off, never 0.
const Off = -1

// ResolveMax returns the byte limit an inline limit setting stands for.
func ResolveMax(setting int) (int, error) {
	switch {
	case setting == 0:
		return umem.InlineSlotSize, nil
	case setting == Off:
		return 0, nil
	case setting < 0 || setting > umem.InlineSlotSize:
		return 0, fmt.Errorf("inline limit %d: want 1..%d, 0 (the default, %d) or off", setting, umem.InlineSlotSize, umem.InlineSlotSize)
	}
	return setting, nil
}
