package main

import (
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// TestLinkListHealth: the control socket's link list says the daemon's
// health, as the CNI plugin's STATUS reads it, through a forwarder's life
// (fwdtest's in-memory links: no root): forwarding with links; no links,
// still available (a switch takes links), once every link is removed;
// forwarding again after an add; rebuilding, still available, once the
// forwarder stops while the daemon goes on (daemon.run builds the next); and
// stopping, not available, saying it drains, once the daemon is going.
func TestLinkListHealth(t *testing.T) {
	env := fwdtest.New()
	for _, n := range []string{"up0", "pod1", "pod2"} {
		env.AddLink(n, fwdtest.LinkOptions{})
	}
	f := newFakeSwitch(t, env)
	cs := &controlSocket{mode: "switch"}
	cs.setForwarder(f)
	path := serveLinkOps(t, cs)
	for _, step := range []struct {
		name      string
		do        func() error
		health    string
		available bool
		says      string // in HealthDetail
	}{
		{"one link", nil, linkop.HealthForwarding, true, ""},
		{"the last link removed", func() error { return f.RemoveLink("up0") }, linkop.HealthNoLinks, true, "no links"},
		{"a link added", func() error { return f.AddLink("pod1") }, linkop.HealthForwarding, true, ""},
		{"the forwarder stopped, the daemon not", func() error { f.Stop(); return nil }, linkop.HealthRebuilding, true, "rebuilding"},
		{"the daemon stopping", func() error { cs.stopping.Store(true); return nil }, linkop.HealthStopping, false, "draining"},
	} {
		if step.do != nil {
			if err := step.do(); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		}
		c, err := linkop.Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.ListLinks()
		c.Close()
		if err != nil {
			t.Fatalf("%s: link list: %v", step.name, err)
		}
		if l.Health != step.health || !strings.Contains(l.HealthDetail, step.says) || (l.Available() == nil) != step.available {
			t.Errorf("%s: link list health %q %q, available %v; want %s saying %q, available %v",
				step.name, l.Health, l.HealthDetail, l.Available(), step.health, step.says, step.available)
		}
	}
}
