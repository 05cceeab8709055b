package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// preVLANCommit is the last commit of xdpfwd before VLANs: its daemon
// hands over (handover version 1) and knows no VLAN.
const preVLANCommit = "2c0946e"

// TestDaemonVLANs: a switch whose uplink is a port of every VLAN, three
// links added as access ports (link add --vlan): two of VLAN 100, one
// secured, and one of 200. Pods of 100 reach each other; neither reaches
// the pod of 200, nor the uplink's untagged host (VLAN 0: their frames
// reach it tagged). link list shows every port's VLANs. Refused and changing
// nothing: another VLAN for a forwarded link, --vlan with --trunk, a
// secured trunk, a VLAN past 4094; a trunk given a MAC is unsecured
// (a router's port). A daemon of the commit before VLANs
// is refused as successor (it exits 1, told to restart instead): it
// would put every port in every network; the daemon goes on. A successor of this commit takes the
// VLANs over; killed (-9) and started again, the daemon adds the links
// back from its state file, in their VLANs.
func TestDaemonVLANs(t *testing.T) {
	h := newHosts(t, 5)
	dir := t.TempDir()
	ctl := filepath.Join(dir, "ctl.sock")
	// (The uplink a port of every VLAN: the older daemon knows no
	// --trunk. TestCNIVLANNetworks's uplinks are trunks.)
	args := []string{"run", "--mode", "switch", "--queues", "1", "--link", h.Links[0],
		"--max-links", "6", "--stats-interval", "0", "--control", ctl}
	d := startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	mac1, err := h.NS[1].HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range [][]string{
		{h.Links[1], "--vlan", "100", "--mac", mac1.String(), "--ip", h.V4[1].String()},
		{h.Links[2], "--vlan", "100"},
		{h.Links[3], "--vlan", "200"},
	} {
		if r := runBin(t, 10*time.Second, nil, append(append([]string{"link", "add"}, a...), "--control", ctl)...); r.code != 0 {
			t.Fatalf("link add %v: exit %d, %s", a, r.code, r.stderr)
		}
	}
	want := map[string]string{h.Links[1]: "access 100", h.Links[2]: "access 100", h.Links[3]: "access 200"}
	isolated := func(when string) {
		t.Helper()
		if res, err := topo.Ping(h.NS[1], h.V4[2], 1, 3*time.Second); err != nil || res.Received != 1 {
			t.Errorf("%s: ping VLAN 100 → VLAN 100: %+v %v", when, res, err)
		}
		for _, c := range []struct {
			from, to int
			what     string
		}{{1, 3, "VLAN 100 → VLAN 200"}, {3, 2, "VLAN 200 → VLAN 100"}, {1, 0, "VLAN 100 → the uplink's untagged host"}, {3, 0, "VLAN 200 → the uplink's untagged host"}} {
			if res, err := topo.Ping(h.NS[c.from], h.V4[c.to], 1, 300*time.Millisecond); err == nil && res.Received != 0 {
				t.Errorf("%s: ping %s answered", when, c.what)
			}
		}
		out := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl).stdout
		for link, v := range want {
			if !regexp.MustCompile(`(?m)^\s*` + link + `\s.*\s` + regexp.QuoteMeta(v) + `\s`).MatchString(out) {
				t.Errorf("%s: link list does not show %s as %s:\n%s", when, link, v, out)
			}
		}
	}
	isolated("after the adds")
	var l struct{ Links []linkop.Link }
	if r := runBin(t, 10*time.Second, nil, "link", "list", "--json", "--control", ctl); json.Unmarshal([]byte(r.stdout), &l) != nil {
		t.Errorf("link list --json: %s", r.stdout)
	}
	for _, k := range l.Links {
		if k.Name == h.Links[3] && (k.VLAN == nil || k.VLAN.Access != 200) {
			t.Errorf("link list --json: %s's vlan %+v, want access 200", k.Name, k.VLAN)
		}
	}

	// Refusals: exit 2, nothing changed.
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{h.Links[2], "--vlan", "200"}, "VLANs access 200"},
		{[]string{h.Links[4], "--vlan", "100", "--trunk", "5"}, "not both"},
		{[]string{h.Links[4], "--trunk", "0,100", "--mac", "02:00:00:00:00:44", "--port-security", "on"}, "access port's"},
		{[]string{h.Links[4], "--vlan", "4095"}, "1..4094"},
		{[]string{h.Links[4], "--trunk", "7-3"}, "trunk"},
	} {
		r := runBin(t, 10*time.Second, nil, append(append([]string{"link", "add"}, c.args...), "--control", ctl)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.says) {
			t.Errorf("link add %v: exit %d, %q; want %d saying %q", c.args, r.code, r.stderr, exitUsage, c.says)
		}
	}
	if r := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl); strings.Contains(r.stdout, h.Links[4]) {
		t.Errorf("a refused add left %s forwarded:\n%s", h.Links[4], r.stdout)
	}
	isolated("after the refusals")
	// A trunk given the pod's MAC (as the CNI plugin gives it) and no
	// word on port security: unsecured, a router's port.
	if r := runBin(t, 10*time.Second, nil, "link", "add", h.Links[4], "--trunk", "100", "--mac", "02:00:00:00:00:44", "--control", ctl); r.code != 0 {
		t.Fatalf("link add %s --trunk 100 --mac: exit %d, %s", h.Links[4], r.code, r.stderr)
	}
	want[h.Links[4]] = "trunk 100"
	if out := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl).stdout; !regexp.MustCompile(`(?m)^\s*` + h.Links[4] + `\s.*\s-\s+trunk 100\s`).MatchString(out) {
		t.Errorf("link list: %s is not an unsecured trunk of 100 (pod -, policy trunk 100):\n%s", h.Links[4], out)
	}

	// The commit before VLANs would drop them: refused, by the daemon
	// for its version (it exits 1: it takes the refusal for a failure to
	// freeze), or by the successor itself, whose memory layout is not
	// this daemon's (exit 2), whichever sees it first.
	mark := len(d.stderr.String())
	old := startPath(t, binaryAt(t, preVLANCommit), nil, append(args, "--takeover", ctl)...)
	code := old.wait(60 * time.Second)
	byDaemon := code == exitFailure && strings.Contains(old.stderr.String(), "restart it instead")
	byLayout := code == exitUsage && strings.Contains(old.stderr.String(), "a restart, not a handover")
	if !byDaemon && !byLayout {
		t.Errorf("a successor of %s: exit %d, want %d or %d and a word to restart instead:\n%s", preVLANCommit, code, exitFailure, exitUsage, old.stderr.String())
	}
	log := d.stderr.String()[mark:]
	if byDaemon && !strings.Contains(log, "handover refused") || byLayout && !strings.Contains(log, "did not take over; going on") || d.exited() {
		t.Errorf("the daemon's log does not say it refused the older successor, or it exited:\n%s", log)
	}
	isolated("after refusing an older successor")

	// This commit's successor takes the VLANs over.
	next := startBin(t, append(args, "--takeover", ctl)...)
	tookOver(t, d, next)
	d = next
	isolated("after the handover")

	// Killed, and started again: the links come back in their VLANs.
	d.signal(syscall.SIGKILL)
	d.wait(10 * time.Second)
	d = startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl).stdout, h.Links[3]) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	isolated("after kill -9 and a restart")
	d.interrupt()
}
