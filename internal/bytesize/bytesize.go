// Package bytesize reads and writes byte counts as xdpfwd's flags and
// config file spell them: decimal digits and an optional binary unit (K,
// KiB, M, MiB, G, GiB). It holds no state.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parse reads a byte count: digits and an optional unit. ok is false for
// anything else, or a count over what a uint64 holds (the unit's product
// is checked before it is taken).
func Parse(v string) (n uint64, ok bool) {
	num := strings.TrimRight(v, "KMGiB")
	shift, ok := map[string]uint{"": 0, "K": 10, "KiB": 10, "M": 20, "MiB": 20, "G": 30, "GiB": 30}[v[len(num):]]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64) // no sign, no base prefix
	if err != nil || n > math.MaxUint64>>shift {
		return 0, false
	}
	return n << shift, true
}

// Format writes n as Parse reads it: in GiB or MiB when whole.
func Format(n uint64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	default:
		return strconv.FormatUint(n, 10)
	}
}
