package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/umem"
)

// TestLinkListHealth: the control socket's link list says the daemon's
// health, as the CNI plugin's STATUS reads it, through a forwarder's life
// (fwdtest's in-memory links: no root): forwarding with links; no links,
// still available (a switch takes links), once every link is removed;
// forwarding again after an add; rebuilding, still available, once the
// forwarder stops while the daemon goes on (cmdRun builds the next); and
// stopping, not available, saying it drains, once the daemon is going.
func TestLinkListHealth(t *testing.T) {
	env := fwdtest.New()
	for _, n := range []string{"up0", "pod1", "pod2"} {
		env.AddLink(n, fwdtest.LinkOptions{})
	}
	f, err := fwd.New(fwd.Config{Links: []string{"up0"}, Handler: modes.NewSwitch(4, 1024, 0), MaxLinks: 4, Queues: 1, Env: env, HugePages: umem.HugePagesOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cs := &controlSocket{mode: "switch"}
	cs.setForwarder(f)
	path := filepath.Join(t.TempDir(), "ctl.sock")
	srv, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(time.Second) })
	go srv.Serve(func(c net.Conn) {
		if _, rc, err := control.ReadOp(c, 5*time.Second); err == nil {
			linkop.Serve(rc, daemonLinks{cs})
		}
	})
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
