package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/umem"
)

// TestLinkOpRefusalsChangeNothing holds the daemon's link ops to one
// invariant: a refused request changes nothing. A switch daemon's control
// socket (forwarders of fwdtest's in-memory links: no root) with pods
// added, secured and policed, is sent every kind of request it refuses;
// after each, its links, their port security, limits and port states,
// the switch's static entries and the link state file are as they were,
// and the error carries the code that says why.
func TestLinkOpRefusalsChangeNothing(t *testing.T) {
	env := fwdtest.New()
	for _, n := range []string{"up0", "pod1", "pod2", "pod3", "pod4", "spare"} {
		env.AddLink(n, fwdtest.LinkOptions{})
	}
	env.AddLink("jumbo", fwdtest.LinkOptions{MTU: 9000})
	env.AddLink("twoq", fwdtest.LinkOptions{Queues: 1, RXQueues: 1, TXQueues: 1})
	sw, _, cs, state, path := fakeSwitchDaemon(t, env, 6)

	mac := func(i byte) string { return net.HardwareAddr{0x02, 0x39, 0, 0, 0, i}.String() }
	bw := &linkop.Bandwidth{IngressRate: 1e6, IngressBurst: 1e6, EgressRate: 1e6, EgressBurst: 1e6}
	web0 := &linkop.Pod{Namespace: "shop", Name: "web-0", UID: "u-1"}
	add := func(name string, o linkop.AddOptions) error {
		c, err := linkop.Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.AddLinkWith(name, o)
	}
	del := func(name string) error {
		c, err := linkop.Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.DelLink(name)
	}
	// The pods: pod1 secured with an IP, pod2 secured and policed, pod3
	// plain. A gateway's address learned on the uplink, and an operator's
	// static entry on it.
	for _, p := range []struct {
		name string
		o    linkop.AddOptions
	}{
		{"pod1", linkop.AddOptions{MAC: mac(1), IPs: []string{"10.39.0.1"}, Pod: web0}},
		{"pod2", linkop.AddOptions{MAC: mac(2), Bandwidth: bw}},
		{"pod3", linkop.AddOptions{}},
	} {
		if err := add(p.name, p.o); err != nil {
			t.Fatalf("add %s: %v", p.name, err)
		}
	}
	if err := sw.Table.AddStatic(net.HardwareAddr{0x02, 0x39, 0, 0, 0, 0x50}, 0, 0); err != nil {
		t.Fatal(err)
	}
	// A port given to a name whose link is gone (deleted with its pod,
	// no DEL yet): a refused add must not take its record either.
	if err := sw.SecurePort("gone", modes.Port{MAC: net.HardwareAddr{0x02, 0x39, 0, 0, 0, 0x60}}); err != nil {
		t.Fatal(err)
	}
	// Five addresses of one bucket: pod4's pinned, three static on the
	// uplink, and a fifth to refuse: no room.
	same := sameBucket(sw.Table, net.HardwareAddr{0x02, 0x39, 0xbb, 0, 0, 1}, 5)
	if err := add("pod4", linkop.AddOptions{MAC: same[0].String()}); err != nil {
		t.Fatal(err)
	}
	for _, m := range same[1:4] {
		if err := sw.Table.AddStatic(m, 0, 0); err != nil {
			t.Fatal(err)
		}
	}

	snapshot := func() string {
		l, err := (daemonLinks{cs}).List()
		if err != nil {
			t.Fatal(err)
		}
		for i := range l.Links {
			l.Links[i].RXPackets, l.Links[i].TXPackets = 0, 0
		}
		file, _ := os.ReadFile(state)
		var static []fdb.Entry
		for _, e := range sw.Entries() {
			if e.Static {
				static = append(static, e)
			}
		}
		b, _ := json.Marshal(struct {
			Links  linkop.List
			Ports  map[string]modes.Port
			Limits map[string]modes.Limits
			Static []fdb.Entry
			File   string
		}{l, sw.Ports(), sw.PortLimits(), static, string(file)})
		return string(b)
	}
	on, off := true, false
	for _, c := range []struct {
		name string
		op   func() error
		is   error // errors.Is; nil: any refusal (a *linkop.RequestError)
	}{
		{"add retried as made", func() error {
			return add("pod1", linkop.AddOptions{MAC: mac(1), IPs: []string{"10.39.0.1"}, Pod: web0})
		}, linkop.ErrExists},
		{"add retried without its pod", func() error { return add("pod1", linkop.AddOptions{MAC: mac(1), IPs: []string{"10.39.0.1"}}) }, linkop.ErrExists},
		{"add naming another pod", func() error {
			return add("pod1", linkop.AddOptions{MAC: mac(1), IPs: []string{"10.39.0.1"}, Pod: &linkop.Pod{Namespace: "shop", Name: "web-1"}})
		}, linkop.ErrExistsOther},
		{"add naming the pod with another UID", func() error {
			return add("pod1", linkop.AddOptions{MAC: mac(1), IPs: []string{"10.39.0.1"}, Pod: &linkop.Pod{Namespace: "shop", Name: "web-0", UID: "u-2"}})
		}, linkop.ErrExistsOther},
		{"plain add naming a pod", func() error { return add("pod3", linkop.AddOptions{Pod: web0}) }, linkop.ErrExists},
		{"add with a bad pod", func() error {
			return add("spare", linkop.AddOptions{Pod: &linkop.Pod{Namespace: "shop", Name: "web 0"}})
		}, nil},
		{"add of a secured link with another MAC", func() error { return add("pod1", linkop.AddOptions{MAC: mac(9), IPs: []string{"10.39.0.1"}}) }, linkop.ErrExistsOther},
		{"add of a secured link with another IP", func() error { return add("pod1", linkop.AddOptions{MAC: mac(1), IPs: []string{"10.39.0.9"}}) }, linkop.ErrExistsOther},
		{"add of a secured link without port security", func() error { return add("pod1", linkop.AddOptions{MAC: mac(1), PortSecurity: &off, Bandwidth: bw}) }, linkop.ErrExistsOther},
		{"add of a policed link with other limits", func() error {
			b := *bw
			b.EgressRate = 2e6
			return add("pod2", linkop.AddOptions{MAC: mac(2), Bandwidth: &b})
		}, linkop.ErrExistsOther},
		{"add of a policed link without limits", func() error { return add("pod2", linkop.AddOptions{MAC: mac(2)}) }, linkop.ErrExistsOther},
		{"add of a plain link with a MAC", func() error { return add("pod3", linkop.AddOptions{MAC: mac(3)}) }, linkop.ErrExistsOther},
		{"plain add of a secured link", func() error { return add("pod1", linkop.AddOptions{}) }, linkop.ErrExists},
		{"add of the uplink", func() error { return add("up0", linkop.AddOptions{MAC: mac(7)}) }, linkop.ErrExists},
		{"add with another pod's MAC", func() error { return add("spare", linkop.AddOptions{MAC: mac(1)}) }, linkop.ErrMACInUse},
		{"add with a MAC static on the uplink", func() error { return add("spare", linkop.AddOptions{MAC: "02:39:00:00:00:50"}) }, linkop.ErrMACInUse},
		{"add with a MAC of a full bucket", func() error { return add("spare", linkop.AddOptions{MAC: same[4].String()}) }, linkop.ErrMACNoRoom},
		{"add with a bad MAC", func() error { return add("spare", linkop.AddOptions{MAC: "02:39"}) }, nil},
		{"add with a multicast MAC", func() error { return add("spare", linkop.AddOptions{MAC: "03:39:00:00:00:01"}) }, nil},
		{"add with a bad IP", func() error { return add("spare", linkop.AddOptions{MAC: mac(8), IPs: []string{"10.39.0"}}) }, nil},
		{"add with port security and no MAC", func() error { return add("spare", linkop.AddOptions{PortSecurity: &on}) }, nil},
		{"add with a rate and no burst", func() error {
			return add("spare", linkop.AddOptions{MAC: mac(8), Bandwidth: &linkop.Bandwidth{EgressRate: 1e6}})
		}, nil},
		{"add with a burst over 4 GiB", func() error {
			return add("spare", linkop.AddOptions{MAC: mac(8), Bandwidth: &linkop.Bandwidth{EgressRate: 1e6, EgressBurst: 1 << 40}})
		}, nil},
		{"add of a link the host has not", func() error { return add("nosuch", linkop.AddOptions{MAC: mac(8), Bandwidth: bw}) }, linkop.ErrNoSuchLink},
		{"add of a link whose MTU the frames cannot hold", func() error { return add("jumbo", linkop.AddOptions{MAC: mac(8), Bandwidth: bw}) }, linkop.ErrMTU},
		{"add of the gone link's name, another MAC, no such link", func() error { return add("gone", linkop.AddOptions{MAC: mac(8)}) }, nil},
		{"add past --max-links", func() error {
			if err := add("spare", linkop.AddOptions{}); err != nil {
				return fmt.Errorf("filling the last place: %w", err)
			}
			return errors.Join(add("twoq", linkop.AddOptions{MAC: mac(8), Bandwidth: bw}), del("spare"))
		}, linkop.ErrFull},
		{"del of a link not forwarded", func() error { return del("nosuch") }, linkop.ErrUnknownLink},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot()
			err := c.op()
			var re *linkop.RequestError
			if err == nil || c.is == nil && !errors.As(err, &re) || c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("%v; want a refusal (%v)", err, c.is)
			}
			if after := snapshot(); after != before {
				t.Errorf("the refusal (%v) changed the daemon:\nbefore %s\nafter  %s", err, before, after)
			}
		})
	}
}

// sameBucket is n addresses that share a bucket of t (the first is
// like, the rest follow it).
func sameBucket(t *fdb.Table, like net.HardwareAddr, n int) []net.HardwareAddr {
	out := []net.HardwareAddr{like}
	for i := 0; len(out) < n; i++ {
		m := net.HardwareAddr{0x02, 0x39, 0xcc, byte(i >> 16), byte(i >> 8), byte(i)}
		if t.Bucket(fdb.Key(m, 0)) == t.Bucket(fdb.Key(like, 0)) {
			out = append(out, m)
		}
	}
	return out
}

// fakeSwitchDaemon is a switch daemon's control socket over env's links
// (fwdtest: no root), on the uplink up0, taking up to maxLinks links
// with port security on; its state file, and the socket's path.
func fakeSwitchDaemon(t *testing.T, env *fwdtest.Env, maxLinks int) (sw *modes.Switch, f *fwd.Forwarder, cs *controlSocket, state, path string) {
	t.Helper()
	sw = modes.NewSwitch(1, 1024, time.Minute)
	f, err := fwd.New(fwd.Config{Links: []string{"up0"}, Handler: sw, MaxLinks: maxLinks, Queues: 1, Env: env,
		HugePages: umem.HugePagesOff, MultiBufferMode: fwd.MultiBufferOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	state = filepath.Join(t.TempDir(), "ctl.sock.links")
	cs = &controlSocket{mode: "switch", sw: sw, portSecurity: true, state: state, given: []string{"up0"}}
	cs.setForwarder(f)
	return sw, f, cs, state, serveLinkOps(t, cs)
}
