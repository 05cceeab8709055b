package enum_test

import (
	"fmt"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/enum"
)

type mode int

var modeNames = enum.New[mode]("mode", "auto", "on", "off")

// TestNames: every name parses to its value and back; what no value
// names is refused, and a value without a name is written as Go would.
func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    mode
		ok   bool
	}{{"auto", 0, true}, {"on", 1, true}, {"off", 2, true}, {"", 0, false}, {"On", 0, false}, {"true", 0, false}} {
		v, ok := modeNames.Parse(tc.name)
		if v != tc.v || ok != tc.ok {
			t.Errorf("Parse(%q) = %d, %v; want %d, %v", tc.name, v, ok, tc.v, tc.ok)
		}
		if ok && modeNames.String(v) != tc.name {
			t.Errorf("String(%d) = %q, want %q", v, modeNames.String(v), tc.name)
		}
	}
	if got := modeNames.String(3); got != "mode(3)" {
		t.Errorf("String(3) = %q", got)
	}
	if got := modeNames.String(-1); got != "mode(-1)" {
		t.Errorf("String(-1) = %q", got)
	}
	if got := modeNames.Want(); got != "auto, on or off" {
		t.Errorf("Want() = %q", got)
	}
}

func ExampleNames() {
	type zeroCopy int
	names := enum.New[zeroCopy]("ZeroCopy", "auto", "on", "off")
	z, ok := names.Parse("on")
	fmt.Println(z, ok, names.String(z), names.String(7), names.Want())
	// Output: 1 true on ZeroCopy(7) auto, on or off
}
