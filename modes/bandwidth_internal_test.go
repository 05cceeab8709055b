package modes

import "testing"

// TestPolicedCount: the count of policed links, which spares a switch
// without limits the per-frame loads, follows every way a link gets or
// loses its limits: limited before it is added, when added, limited again,
// removed, added back, another added at its index, released.
func TestPolicedCount(t *testing.T) {
	s := NewSwitch(2, 0, 0)
	l := Limits{EgressRate: 8e6, EgressBurst: 1 << 20}
	step := func(what string, want int32) {
		t.Helper()
		if got := s.policed.Load(); got != want {
			t.Fatalf("%s: %d links policed, want %d", what, got, want)
		}
	}
	if err := s.LimitPort("bwa", l); err != nil {
		t.Fatal(err)
	}
	step("limited, not added", 0)
	s.LinkAddedAs(2, "bwa")
	step("added", 1)
	if err := s.LimitPort("bwa", Limits{IngressRate: 8e6, IngressBurst: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	step("limited anew", 1)
	s.LinkAddedAs(3, "bwb")
	step("an unlimited link added", 1)
	s.LinkRemoved(2)
	step("removed", 0)
	s.LinkAddedAs(2, "bwc")
	step("another at its index", 0)
	s.LinkAddedAs(4, "bwa")
	step("added back elsewhere", 1)
	if err := s.LimitPort("bwa", Limits{}); err != nil {
		t.Fatal(err)
	}
	step("zero limits", 0)
	if err := s.LimitPort("bwb", l); err != nil {
		t.Fatal(err)
	}
	step("a forwarded link limited", 1)
	s.ReleaseLimits("bwb")
	step("released", 0)
}
