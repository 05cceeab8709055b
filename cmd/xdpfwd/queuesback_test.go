package main

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestLinkNotReaddedWaitsForIt: a switch daemon with 2 workers whose
// link's queue count changes (ethtool -L, 2 to 3 channels) takes it out
// and adds it back on its new queues; when that add back fails (its MTU
// was raised meanwhile to 3000, which a 2048-byte frame cannot hold) the
// link stays out and the daemon says so in its link list's health
// detail (its state stays forwarding: the other links are served). With
// --wait-for-links it is out as a deleted link is, and added back once
// it can be (its MTU back at 1500), the pods behind it reaching each
// other through it again, the forwarder never rebuilt; it used to stay
// out for good, logged once. Without --wait-for-links it stays out, the
// health detail saying so, and SIGINT still exits 0 (the daemon served
// the others: a link out is not its failure).
//
// Fewer queues than the workers, the other way an add back fails, the
// kernel does not allow: ethtool -L refuses to remove a queue an AF_XDP
// socket is bound to (EINVAL).
//
// And `link del` of a link out ends the wait: it succeeds, the health no
// longer names the link, and it is not added back when it could be.
func TestLinkNotReaddedWaitsForIt(t *testing.T) {
	for _, tc := range []struct {
		name           string
		wait, del, pod bool
	}{
		{"wait-for-links", true, false, false},
		{"no-wait", false, false, false},
		{"wait-for-links, link del", true, true, false},
		// The link added while running (link add, as the CNI plugin
		// adds a pod's): waited for as well.
		{"wait-for-links, added link", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testLinkNotReaddedWaitsForIt(t, tc.wait, tc.del, tc.pod) })
	}
}

func testLinkNotReaddedWaitsForIt(t *testing.T, wait, del, pod bool) {
	p := newPair(t, topo.Options{Queues: 4})
	// 2 channels of the 4 the veths can have, on both ends (no XDP yet).
	for _, set := range []func() error{
		func() error { return ethtool.SetChannels(p.LinkA, 2, 2) },
		func() error { return p.A.Do(func() error { return ethtool.SetChannels("eth0", 2, 2) }) },
		func() error { return ethtool.SetChannels(p.LinkB, 2, 2) },
		func() error { return p.B.Do(func() error { return ethtool.SetChannels("eth0", 2, 2) }) },
	} {
		if err := set(); err != nil {
			t.Fatalf("ethtool -L rx 2 tx 2: %v", err)
		}
	}
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	args := []string{"run", "--mode", "switch", "--queues", "2", "--link", p.LinkB, "--stats-interval", "0", "--control", ctl}
	if !pod {
		args = append(args, "--link", p.LinkA)
	}
	if wait {
		args = append(args, "--wait-for-links")
	}
	d := startBin(t, args...)
	waitSocket(t, d, ctl)
	if pod {
		if r := runBin(t, 10*time.Second, nil, "link", "add", p.LinkA, "--control", ctl); r.code != 0 {
			t.Fatalf("link add %s: exit %d, stderr %q\n%s", p.LinkA, r.code, r.stderr, d.stderr.String())
		}
	}
	waitReady(t, d, p, 1, 10*time.Second)
	list := func() linkop.List {
		t.Helper()
		c, err := linkop.Dial(ctl)
		if err != nil {
			t.Fatalf("dial xdpfwd: %v\n%s", err, d.stderr.String())
		}
		defer c.Close()
		l, err := c.ListLinks()
		if err != nil {
			t.Fatalf("link list: %v\n%s", err, d.stderr.String())
		}
		return l
	}
	has := func(l linkop.List) bool { return l.Has(p.LinkA) }
	// eventually polls the link list until ok, for 10 s at most.
	eventually := func(ok func(linkop.List) bool) (linkop.List, bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			l := list()
			if ok(l) {
				return l, true
			}
			if time.Now().After(deadline) || d.exited() {
				return l, false
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	until := func(what string, ok func(linkop.List) bool) linkop.List {
		t.Helper()
		l, done := eventually(ok)
		if !done {
			t.Fatalf("%s: link list %+v for 10 s\n%s", what, l, d.stderr.String())
		}
		return l
	}
	ping := func(when string) {
		t.Helper()
		if res, err := topo.Ping(p.A, p.V4B, 3, 3*time.Second); err != nil || res.Received == 0 {
			t.Fatalf("%s: ping A → B: %d/%d answered, %v\n%s", when, res.Received, res.Sent, err, d.stderr.String())
		}
	}
	mtu := func(n int) {
		t.Helper()
		if out, err := exec.Command("ip", "link", "set", p.LinkA, "mtu", strconv.Itoa(n)).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s mtu %d: %v: %s", p.LinkA, n, err, out)
		}
	}
	ping("before")

	mtu(3000)
	// Growing, the link first: with XDP on p.LinkA the veth driver wants
	// its RX queues never fewer than its peer's TX queues.
	if err := ethtool.SetChannels(p.LinkA, 3, 3); err != nil {
		t.Fatalf("ethtool -L %s rx 3 tx 3: %v", p.LinkA, err)
	}
	if err := p.A.Do(func() error { return ethtool.SetChannels("eth0", 3, 3) }); err != nil {
		t.Fatalf("ethtool -L eth0 (%s's peer) rx 3 tx 3: %v", p.LinkA, err)
	}
	waitLog(t, d, "not added back", 10*time.Second)
	until(p.LinkA+" out", func(l linkop.List) bool { return !has(l) })
	l, _ := eventually(func(l linkop.List) bool { return strings.Contains(l.HealthDetail, p.LinkA) })
	if !strings.Contains(l.HealthDetail, p.LinkA) || l.Health != linkop.HealthForwarding || l.Available() != nil || !strings.Contains(l.HealthDetail, "MTU") {
		t.Errorf("%s out: health %q %q, available %v; want forwarding, available, the detail naming it and why",
			p.LinkA, l.Health, l.HealthDetail, l.Available())
	}
	t.Logf("%s out: health %q %q", p.LinkA, l.Health, l.HealthDetail)

	if del {
		if r := runBin(t, 10*time.Second, nil, "link", "del", p.LinkA, "--control", ctl); r.code != 0 {
			t.Fatalf("link del %s, out: exit %d, stderr %q\n%s", p.LinkA, r.code, r.stderr, d.stderr.String())
		}
		if l := list(); strings.Contains(l.HealthDetail, p.LinkA) {
			t.Errorf("link del %s, out: health detail %q still names it", p.LinkA, l.HealthDetail)
		}
	}
	mtu(1500)
	if wait && !del {
		start := time.Now()
		l = until(p.LinkA+" MTU back at 1500", has)
		t.Logf("%s added back %v after its MTU was back at 1500 (polled every %v)", p.LinkA, time.Since(start).Round(time.Millisecond), returnPoll)
		if strings.Contains(l.HealthDetail, p.LinkA) {
			t.Errorf("%s back: health detail %q still names it", p.LinkA, l.HealthDetail)
		}
		ping("with the link back")
	} else {
		// Without --wait-for-links, or after link del, nothing adds it
		// back: it is still out after two of the polls --wait-for-links
		// makes.
		time.Sleep(2 * returnPoll)
		if l := list(); has(l) || strings.Contains(l.HealthDetail, p.LinkA) == del {
			t.Errorf("%s's MTU back (--wait-for-links %v, link del %v): link list %+v; want it out, the detail naming it unless deleted",
				p.LinkA, wait, del, l)
		}
	}
	if n := strings.Count(d.stderr.String(), readyMsg); n != 1 {
		t.Errorf("%d ready lines: the forwarder was rebuilt\n%s", n, d.stderr.String())
	}
	if n := strings.Count(d.stderr.String(), "not added again"); n > 1 {
		t.Errorf("the failed add back logged %d times; want once per reason\n%s", n, d.stderr.String())
	}
	d.interrupt()
}
