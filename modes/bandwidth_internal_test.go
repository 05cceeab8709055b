package modes

import "testing"

// TestPolicedCount: the count of policed links, which spares a switch
// without limits the per-frame loads, and the set of links with an
// ingress limit, which floods are charged to, follow every way a link
// gets or loses its limits: limited before it is added, when added,
// limited again, removed, added back, another added at its index,
// released.
func TestPolicedCount(t *testing.T) {
	s := NewSwitch(2, 0, 0)
	l := Limits{EgressRate: 8e6, EgressBurst: 1 << 20}
	step := func(what string, want int32, ingress uint64) {
		t.Helper()
		if got, in := s.policed.Load(), s.ingress.Load(); got != want || in != ingress {
			t.Fatalf("%s: %d links policed, ingress limits on %b; want %d, %b", what, got, in, want, ingress)
		}
	}
	if err := s.LimitPort("bwa", l); err != nil {
		t.Fatal(err)
	}
	step("limited, not added", 0, 0)
	s.LinkAddedAs(2, "bwa")
	step("added", 1, 0)
	if err := s.LimitPort("bwa", Limits{IngressRate: 8e6, IngressBurst: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	step("limited anew", 1, 1<<2)
	s.LinkAddedAs(3, "bwb")
	step("an unlimited link added", 1, 1<<2)
	s.LinkRemoved(2)
	step("removed", 0, 0)
	s.LinkAddedAs(2, "bwc")
	step("another at its index", 0, 0)
	s.LinkAddedAs(4, "bwa")
	step("added back elsewhere", 1, 1<<4)
	if err := s.LimitPort("bwa", Limits{}); err != nil {
		t.Fatal(err)
	}
	step("zero limits", 0, 0)
	if err := s.LimitPort("bwb", l); err != nil {
		t.Fatal(err)
	}
	step("a forwarded link limited", 1, 0)
	s.ReleaseLimits("bwb")
	step("released", 0, 0)
}
