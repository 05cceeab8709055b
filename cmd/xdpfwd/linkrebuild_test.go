package main

import (
	"errors"
	"net"
	"path/filepath"
	"slices"
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

// TestLinkOpsDuringRebuild: between a forwarder's stop and the next one's
// start (daemon.run rebuilding it: a link's queue count changed, or
// --wait-for-links waiting for a link), a link request is not refused as
// unsupported (which the CNI plugin takes for a definite error, 100): it
// waits for the next forwarder and is made on it; if none comes within
// a while, or the daemon stops, it fails as one to try again (no
// code, not a bad request: the plugin's 11). Forwarders of fwdtest's
// in-memory links: no root.
func TestLinkOpsDuringRebuild(t *testing.T) {
	env := fwdtest.New()
	for _, n := range []string{"up0", "pod1", "pod2"} {
		env.AddLink(n, fwdtest.LinkOptions{})
	}
	newForwarder := func(links ...string) *fwd.Forwarder {
		t.Helper()
		f := newFakeSwitch(t, env)
		for _, l := range links { // as keptLinks.restore does
			if err := f.AddLink(l); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	cs := &controlSocket{mode: "switch"}
	path := serveLinkOps(t, cs)
	// request runs op over the control socket, as `xdpfwd link` and the
	// CNI plugin do.
	request := func(op, name string) error {
		c, err := linkop.Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if op == "add" {
			return c.AddLink(name)
		}
		return c.DelLink(name)
	}
	tryAgain := func(what string, err error) {
		t.Helper()
		var re *linkop.RequestError
		if err == nil || errors.Is(err, linkop.ErrUnsupported) || errors.As(err, &re) {
			t.Errorf("%s: %v; want an error to try again (not unsupported, not a bad request)", what, err)
		}
	}
	f1 := newForwarder()
	cs.setForwarder(f1)
	// Stopped and closed, as daemon.run leaves it while it builds the next.
	f1.Stop()
	f1.Close()
	// No next forwarder within the wait.
	cs.setRebuildWait(50 * time.Millisecond)
	tryAgain("add while the forwarder is stopped, none after it", request("add", "pod1"))

	// The next forwarder comes while the requests wait: made on it.
	cs.setRebuildWait(20 * time.Second)
	for _, tc := range []struct {
		op, name string
		had      []string // the next forwarder's added links (restored)
		want     []string
	}{
		{"add", "pod1", nil, []string{"up0", "pod1"}},
		{"del", "pod1", []string{"pod1"}, []string{"up0"}},
	} {
		done := make(chan error, 1)
		go func() { done <- request(tc.op, tc.name) }()
		next := newForwarder(tc.had...)
		cs.setForwarder(next)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s %s during a rebuild: %v; want it made on the next forwarder", tc.op, tc.name, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s %s during a rebuild: no answer in 15 s", tc.op, tc.name)
		}
		if got := slices.DeleteFunc(next.Links(), func(s string) bool { return s == "" }); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s during a rebuild: the next forwarder has %q, want %q", tc.op, tc.name, got, tc.want)
		}
		next.Stop()
		next.Close()
	}

	// The daemon stops while a request waits.
	done := make(chan error, 1)
	go func() { done <- request("add", "pod2") }()
	cs.setForwarder(nil)
	select {
	case err := <-done:
		tryAgain("add as the daemon stops", err)
	case <-time.After(15 * time.Second):
		t.Fatal("add as the daemon stops: no answer in 15 s")
	}
}

// TestLinkListAddRefused: the link list says why an add would be refused
// (AddRefused, the CNI plugin's STATUS): not for a running switch, nor
// one stopped for a rebuild (adds wait for the next); for a mode that
// takes no links, and for a forwarder closed without a stop (one with no
// link left takes links: TestEveryLinkLeavesDaemon).
func TestLinkListAddRefused(t *testing.T) {
	env := fwdtest.New()
	env.AddLink("up0", fwdtest.LinkOptions{})
	newForwarder := func() *fwd.Forwarder {
		t.Helper()
		f, err := fwd.New(fwd.Config{Links: []string{"up0"}, Handler: modes.NewSwitch(2, 1024, 0), MaxLinks: 2, Queues: 1, Env: env, HugePages: umem.HugePagesOff})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	for _, tc := range []struct {
		name    string
		mode    string
		stop    func(*fwd.Forwarder)
		refused string
	}{
		{"running switch", "switch", func(*fwd.Forwarder) {}, ""},
		{"stopped for a rebuild", "switch", func(f *fwd.Forwarder) { f.Stop() }, ""},
		{"xconnect", "xconnect", func(*fwd.Forwarder) {}, "xconnect"},
		{"closed", "switch", func(f *fwd.Forwarder) { f.Close() }, "stopping"},
	} {
		f := newForwarder()
		tc.stop(f)
		cs := &controlSocket{mode: tc.mode}
		cs.setForwarder(f)
		l, err := daemonLinks{cs}.List()
		if err != nil || (tc.refused == "") != (l.AddRefused == "") || !strings.Contains(l.AddRefused, tc.refused) {
			t.Errorf("%s: list %+v, %v; want AddRefused %q", tc.name, l, err, tc.refused)
		}
		f.Close()
	}
}

// newFakeSwitch is a switch forwarder on env's in-memory link up0, taking
// up to 4 links (no root).
func newFakeSwitch(t *testing.T, env *fwdtest.Env) *fwd.Forwarder {
	t.Helper()
	f, err := fwd.New(fwd.Config{Links: []string{"up0"}, Handler: modes.NewSwitch(4, 1024, 0), MaxLinks: 4, Queues: 1, Env: env, HugePages: umem.HugePagesOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// serveLinkOps serves cs's link requests on a control socket of its own,
// as the daemon does, and returns its path.
func serveLinkOps(t *testing.T, cs *controlSocket) string {
	t.Helper()
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
	return path
}
