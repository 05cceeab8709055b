package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestGivenLinkReturns: a switch daemon whose first link (the uplink) is
// deleted runs on with the others, the links added while running, and
// with --wait-for-links adds the uplink back when it exists again (it
// used to end the forwarder and rebuild it, and without --wait-for-links
// to exit 1); a link added while running that is deleted stays out, and
// so does a --link link removed with `link del`.
func TestGivenLinkReturns(t *testing.T) {
	p := newPair(t, topo.Options{})
	mac := peerMAC(t, p.B)
	// Two veths to add at runtime, each to a namespace of its own.
	type host struct {
		link string
		ns   *topo.NS
		v4   netip.Addr
	}
	var hosts []host
	for i := range 2 {
		ns, err := topo.NewNS(fmt.Sprint("rb", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		h := host{link: fmt.Sprintf("xb%d%d", os.Getpid()%100000, i), ns: ns, v4: netip.AddrFrom4([4]byte{198, 18, 0, byte(3 + i)})}
		for _, args := range [][]string{
			{"link", "add", h.link, "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
			{"link", "set", h.link, "up"},
			{"-n", ns.Name, "addr", "add", h.v4.String() + "/24", "dev", "eth0"},
			{"-n", ns.Name, "link", "set", "eth0", "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
		t.Cleanup(func() { exec.Command("ip", "link", "del", h.link).Run() })
		hosts = append(hosts, h)
	}
	kept, gone := hosts[0], hosts[1]

	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	// Link 0 is B, the uplink the hosts ping.
	d := startBin(t, "run", "--mode", "switch", "--queues", "1", "--link", p.LinkB, "--link", p.LinkA,
		"--wait-for-links", "--stats-interval", "0", "--control", ctl)
	waitReady(t, d, p, 1, 10*time.Second)
	waitSocket(t, d, ctl)
	linkCmd := func(op, name string) {
		t.Helper()
		if r := runBin(t, 10*time.Second, nil, "link", op, name, "--control", ctl); r.code != 0 {
			t.Fatalf("link %s %s: exit %d, stderr %q\n%s", op, name, r.code, r.stderr, d.stderr.String())
		}
	}
	list := func() []string {
		t.Helper()
		c, err := linkop.Dial(ctl)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.ListLinks()
		if err != nil {
			return nil // no forwarder (yet)
		}
		var names []string
		for _, k := range l.Links {
			names = append(names, k.Name)
		}
		slices.Sort(names)
		return names
	}
	ping := func(when string, h host) {
		t.Helper()
		res, err := topo.Ping(h.ns, p.V4B, 3, 3*time.Second)
		if err != nil || res.Received == 0 {
			t.Fatalf("%s: ping %s (%s, added) → %s: %d/%d answered, %v\n%s", when, h.v4, h.link, p.V4B, res.Received, res.Sent, err, d.stderr.String())
		}
	}
	linkCmd("add", kept.link)
	linkCmd("add", gone.link)
	linkCmd("del", p.LinkA)
	want := []string{p.LinkB, kept.link, gone.link}
	slices.Sort(want)
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("before the rebuild: link list %q, want %q", got, want)
	}
	ping("before the rebuild", kept)

	deleteLink(t, p.LinkB)
	waitLog(t, d, "link deleted while forwarding: removed", 10*time.Second)
	deleteLink(t, gone.link) // an added link deleted: removed, never back
	want = []string{kept.link}
	deadline := time.Now().Add(10 * time.Second)
	for got := list(); !slices.Equal(got, want); got = list() {
		if time.Now().After(deadline) || d.exited() {
			t.Fatalf("uplink and %s deleted: link list %q, want %q\n%s", gone.link, got, want, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	recreateB(t, p, mac)
	waitLog(t, d, "link back: added again", 10*time.Second)
	want = []string{p.LinkB, kept.link}
	slices.Sort(want)
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("uplink back: link list %q, want %q (the added %s kept, the deleted %s and the removed %s not)\n%s",
			got, want, kept.link, gone.link, p.LinkA, d.stderr.String())
	}
	ping("with the uplink back", kept)
	if n := strings.Count(d.stderr.String(), readyMsg); n != 1 {
		t.Errorf("%d ready lines: the forwarder was rebuilt\n%s", n, d.stderr.String())
	}
	if id, _ := xdpProg(t, p.LinkA); id != 0 {
		t.Errorf("%s, removed before the rebuild, has XDP program %d after it", p.LinkA, id)
	}
	d.interrupt()
	t.Logf("stderr:\n%s", d.stderr.String())
}
