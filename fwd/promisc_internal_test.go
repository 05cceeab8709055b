package fwd

import "testing"

type notPromisc struct{ HandlerFunc }

func (notPromisc) Promiscuous() bool { return false }

// TestResolvePromisc: auto is on for the cross-connect and any Handler
// that does not say otherwise, off for one that needs no promiscuous
// mode; on and off are what they say.
func TestResolvePromisc(t *testing.T) {
	drop := HandlerFunc(func([]Packet) {})
	for _, tc := range []struct {
		mode    PromiscMode
		handler Handler
		want    bool
	}{
		{PromiscAuto, nil, true},
		{PromiscAuto, drop, true},
		{PromiscAuto, notPromisc{drop}, false},
		{PromiscOn, notPromisc{drop}, true},
		{PromiscOff, nil, false},
		{PromiscOff, drop, false},
	} {
		if got := resolvePromisc(tc.mode, tc.handler); got != tc.want {
			t.Errorf("Promisc %v, handler %T: Promiscuous %v, want %v", tc.mode, tc.handler, got, tc.want)
		}
	}
	for _, s := range []string{"auto", "on", "off"} {
		m, err := ParsePromiscMode(s)
		if err != nil || m.String() != s {
			t.Errorf("ParsePromiscMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParsePromiscMode("yes"); err == nil {
		t.Error("ParsePromiscMode(\"yes\"): no error")
	}
}
