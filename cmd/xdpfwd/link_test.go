package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestLinkBadInput: wrong `xdpfwd link` command lines exit 2 with a
// message, before any socket is dialled.
func TestLinkBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"link"}, "want list, add NAME or del NAME"},
		{[]string{"link", "frob"}, `unknown subcommand "frob"`},
		{[]string{"link", "add"}, "exactly one link NAME"},
		{[]string{"link", "del", "a", "b"}, "exactly one link NAME"},
		{[]string{"link", "add", "a/b"}, "not an interface name"},
		{[]string{"link", "add", "0123456789abcdef"}, "longer than 15 bytes"},
		{[]string{"link", "list", "x"}, `unexpected "x"`},
		{[]string{"link", "list", "--bogus"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		r := runBin(t, 10*time.Second, nil, append(tt.args, "--control", "/nonexistent/x.sock")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("xdpfwd %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), r.code, r.stderr, exitUsage, tt.want)
		}
	}
}

// TestLinkListDaemon: a running switch answers `link list` on its
// control socket with its links and mode; `link add` attaches a link
// while it runs and `link del` detaches it (exit 0, the list follows),
// a second add or del, an add of a link the host lacks or a del of one
// it does not forward, is a bad request (exit 2); the first link and the
// last are deleted like any other, and a link added then takes index 0;
// a capture still works on the same socket.
func TestLinkListDaemon(t *testing.T) {
	p := newPair(t, topo.Options{})
	ns, err := topo.NewNS("lnk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	extra := fmt.Sprintf("xl%d", os.Getpid()%100000)
	for _, args := range [][]string{
		{"link", "add", extra, "type", "veth", "peer", "name", "p0", "netns", ns.Name},
		{"link", "set", extra, "up"},
		{"-n", ns.Name, "link", "set", "p0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", extra).Run() })
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", ctl)
	waitAttached(t, d, p, 10*time.Second)
	waitSocket(t, d, ctl)

	list := func() []string {
		t.Helper()
		r := runBin(t, 10*time.Second, nil, "link", "list", "--json", "--control", ctl)
		var got struct {
			Mode   string        `json:"mode"`
			Queues int           `json:"queues"`
			Links  []linkop.Link `json:"links"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil {
			t.Fatalf("link list: exit %d, %v\nstdout %s\nstderr %s", r.code, err, r.stdout, r.stderr)
		}
		if got.Mode != "switch" || got.Queues < 1 {
			t.Errorf("link list: mode %q, queues %d; want switch and the queues an added link needs", got.Mode, got.Queues)
		}
		var names []string
		for _, l := range got.Links {
			names = append(names, l.Name)
		}
		return names
	}
	if got := list(); !slices.Equal(got, []string{p.LinkA, p.LinkB}) {
		t.Errorf("link list: %q; want %s, %s", got, p.LinkA, p.LinkB)
	}
	r := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl)
	if r.code != 0 || !strings.Contains(r.stdout, p.LinkA) || !strings.Contains(r.stdout, "RX PACKETS") {
		t.Errorf("link list (table): exit %d, stdout %q", r.code, r.stdout)
	}

	for _, step := range []struct {
		op, name string
		code     int
		stderr   string
		not      string // what stderr must not say
		after    []string
	}{
		{"add", extra, 0, "", "", []string{p.LinkA, p.LinkB, extra}},
		{"add", extra, exitUsage, "already", "", []string{p.LinkA, p.LinkB, extra}},
		// A link the host lacks: said so, not that the daemon does not
		// forward it (true, and beside the point of an add).
		{"add", "xlnope0", exitUsage, "the host has no such link", "does not forward", []string{p.LinkA, p.LinkB, extra}},
		{"del", extra, 0, "", "", []string{p.LinkA, p.LinkB}},
		{"del", extra, exitUsage, "does not forward", "", []string{p.LinkA, p.LinkB}},
		// The first link goes like any other, and so does the last.
		{"del", p.LinkA, 0, "", "", []string{p.LinkB}},
		{"del", p.LinkB, 0, "", "", nil},
		{"add", extra, 0, "", "", []string{extra}},
	} {
		r := runBin(t, 10*time.Second, nil, "link", step.op, step.name, "--control", ctl)
		if r.code != step.code || !strings.Contains(r.stderr, step.stderr) || (step.not != "" && strings.Contains(r.stderr, step.not)) {
			t.Errorf("link %s %s: exit %d, stderr %q; want exit %d and %q (without %q)", step.op, step.name, r.code, r.stderr, step.code, step.stderr, step.not)
		}
		if got := list(); !slices.Equal(got, step.after) {
			t.Errorf("after link %s %s: list %q, want %q", step.op, step.name, got, step.after)
		}
	}
	// Through the client: the errors wrap the protocol's sentinels.
	c, err := linkop.Dial(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AddLink(extra); !errors.Is(err, linkop.ErrExists) {
		t.Errorf("AddLink of a forwarded link: %v; want ErrExists", err)
	}
	if err := c.AddLink("xlnope0"); !errors.Is(err, linkop.ErrNoSuchLink) || errors.Is(err, linkop.ErrUnknownLink) {
		t.Errorf("AddLink of a link the host lacks: %v; want ErrNoSuchLink, not ErrUnknownLink", err)
	}
	if err := c.DelLink("xlnope0"); !errors.Is(err, linkop.ErrUnknownLink) {
		t.Errorf("DelLink of a link the host lacks: %v; want ErrUnknownLink (the CNI plugin's DEL takes it as done)", err)
	}

	file := filepath.Join(t.TempDir(), "c.pcapng")
	cp := startCapture(t, "--control", ctl, "-w", file, "--count", "1")
	cp.interrupt()
	d.interrupt()
}

// TestReloadLinks: a SIGHUP whose config file lists another link adds it
// to the running switch, and one that no longer lists it removes it, each
// logged as applied (link=...), no restart asked for.
func TestReloadLinks(t *testing.T) {
	p := newPair(t, topo.Options{})
	ns, err := topo.NewNS("rlk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	extra := fmt.Sprintf("xr%d", os.Getpid()%100000)
	for _, args := range [][]string{
		{"link", "add", extra, "type", "veth", "peer", "name", "p0", "netns", ns.Name},
		{"link", "set", extra, "up"},
		{"-n", ns.Name, "link", "set", "p0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", extra).Run() })
	dir := t.TempDir()
	cfg, ctl := filepath.Join(dir, "xdpfwd.yaml"), filepath.Join(dir, "ctl.sock")
	write := func(links ...string) {
		s := fmt.Sprintf("mode: switch\nqueues: 1\nlink: [%s]\nstats-interval: 0s\n", strings.Join(links, ", "))
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(p.LinkA, p.LinkB)
	d := startBin(t, "run", "--config", cfg, "--control", ctl)
	waitAttached(t, d, p, 10*time.Second)
	waitSocket(t, d, ctl)
	list := func() []string {
		c, err := linkop.Dial(ctl)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.ListLinks()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, k := range l.Links {
			names = append(names, k.Name)
		}
		return names
	}
	reload := func(i int, links []string, want []string) {
		t.Helper()
		write(links...)
		d.signal(syscall.SIGHUP)
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(d.stderr.String(), "config reloaded") < i+1 {
			if time.Now().After(deadline) || d.exited() {
				t.Fatalf("no reload logged after SIGHUP %d; stderr:\n%s", i+1, d.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := list(); !slices.Equal(got, want) {
			t.Errorf("after reload %d: link list %q, want %q\n%s", i+1, got, want, d.stderr.String())
		}
	}
	reload(0, []string{p.LinkA, p.LinkB, extra}, []string{p.LinkA, p.LinkB, extra})
	reload(1, []string{p.LinkA, p.LinkB}, []string{p.LinkA, p.LinkB})
	// A link added over the control socket (a pod's, by the CNI plugin)
	// is not the file's: a reload that leaves the file's list alone
	// leaves it too, and one that drops a file's link drops only that.
	if r := runBin(t, 10*time.Second, nil, "link", "add", extra, "--control", ctl); r.code != 0 {
		t.Fatalf("link add %s: exit %d, %s", extra, r.code, r.stderr)
	}
	reload(2, []string{p.LinkA, p.LinkB}, []string{p.LinkA, p.LinkB, extra})
	reload(3, []string{p.LinkA}, []string{p.LinkA, extra})
	log := d.stderr.String()
	if !strings.Contains(log, `applied="link=`) || !strings.Contains(log, `needs_restart=""`) {
		t.Errorf("reload log: want the link change applied, no restart:\n%s", log)
	}
	// A file that drops the first link and names one the host lacks: the
	// first goes, the other link comes, the missing one is said to have
	// failed, and nothing says the reload was not applied (both
	// were logged for one reload).
	reload(4, []string{p.LinkB, "xnope0"}, []string{p.LinkB, extra})
	log = d.stderr.String()[len(log):]
	if !strings.Contains(log, "config reload: some changes failed") || !strings.Contains(log, "xnope0") || strings.Contains(log, "not applied") {
		t.Errorf("reload with a missing link: want the failed add named, nothing \"not applied\":\n%s", log)
	}
	d.interrupt()
}

// TestSwitchOneUplink: a switch starts on one link (a node's uplink,
// before its first pod) when links may be added, and forwards once one
// is: a host behind the added link pings the host behind the uplink.
func TestSwitchOneUplink(t *testing.T) {
	topo.RequireRoot(t)
	h, err := topo.NewHosts(2, topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--link", h.Links[0], "--stats-interval", "0", "--control", ctl)
	waitSocket(t, d, ctl)
	if r := runBin(t, 10*time.Second, nil, "link", "add", h.Links[1], "--control", ctl); r.code != 0 {
		t.Fatalf("link add %s: exit %d, stderr %q", h.Links[1], r.code, r.stderr)
	}
	res, err := topo.Ping(h.NS[1], h.V4[0], 5, 10*time.Second)
	if err != nil || res.Received != 5 {
		t.Fatalf("ping from the added link's host to the uplink's: %+v %v\n%s", res, err, d.stderr.String())
	}
	// At stop the added link's totals are logged beside the uplink's.
	d.signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM\n%s", code, d.stderr.String())
	}
	for _, l := range h.Links {
		if !regexp.MustCompile(`msg="link totals" link=` + l + ` rx_packets=[1-9]`).MatchString(d.stderr.String()) {
			t.Errorf("no link totals with packets for %s at stop:\n%s", l, d.stderr.String())
		}
	}
}

// TestEveryLinkLeavesDaemon: a node's switch outlives its uplink and its
// pods (a pod's link and the uplink). The uplink is removed with link del,
// the last pod's namespace is deleted, and the daemon runs on with no
// link: /healthz says so (503, "no links"), link list is empty, and the
// pods added next reach each other; it ends with exit 0 and nothing
// leaked. Before, the pod's deletion ended the daemon ("link deleted
// while forwarding", exit 1), or left it with 0 links refusing every add.
func TestEveryLinkLeavesDaemon(t *testing.T) {
	// Veths of more queues than CPUs and the workers left auto (one a
	// CPU): the added links' sockets join every worker, and with none
	// left the next add registers the UMEM again under all of them.
	topo.RequireRoot(t)
	h, err := topo.NewHosts(4, topo.Options{Queues: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("close hosts: %v", err)
		}
	})
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--link", h.Links[0], "--max-links", "8",
		"--stats-interval", "0", "--control", ctl, "--metrics", "127.0.0.1:0")
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	if m := regexp.MustCompile(`workers=(\d+)`).FindStringSubmatch(d.stderr.String()); m == nil || runtime.NumCPU() > 1 && m[1] == "1" {
		t.Fatalf("ready line's workers %v on %d CPUs: want one a CPU\n%s", m, runtime.NumCPU(), d.stderr.String())
	}
	health := "http://" + waitMetricsAddr(t, d, 10*time.Second) + "/healthz"
	link := func(args ...string) {
		t.Helper()
		if r := runBin(t, 30*time.Second, nil, append(append([]string{"link"}, args...), "--control", ctl)...); r.code != 0 {
			t.Fatalf("link %v: exit %d, stderr %q\ndaemon:\n%s", args, r.code, r.stderr, d.stderr.String())
		}
	}
	ping := func(from, to int) {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", h.NS[from].Name, "ping", "-c", "3", "-i", "0.2", "-W", "2", h.V4[to].String()).CombinedOutput()
		if err != nil {
			t.Fatalf("ping host %d → %d: %v\n%s\ndaemon:\n%s", from, to, err, out, d.stderr.String())
		}
	}
	linksNow := func() []string { return linkNames(t, ctl) }

	link("add", h.Links[1])
	ping(1, 0)
	link("del", h.Links[0])                 // the uplink, link 0
	if err := h.NS[1].Close(); err != nil { // the pod's namespace deleted: its veth goes
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(linksNow()) != 0 {
		if d.exited() || time.Now().After(deadline) {
			t.Fatalf("the last pod's namespace deleted: links %q, exited %v\n%s", linksNow(), d.exited(), d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := httpGet(t, health); code != 503 || !strings.Contains(body, "no links") {
		t.Errorf("/healthz with no link: %d %q, want 503 saying no links", code, body)
	}
	// The link list says the same (the CNI plugin's STATUS reads it),
	// and that a switch without links is available: it takes them.
	if l := linkList(t, ctl); l.Health != linkop.HealthNoLinks || !strings.Contains(l.HealthDetail, "no links") || l.Available() != nil {
		t.Errorf("link list with no link: health %q %q, available %v; want %s, available", l.Health, l.HealthDetail, l.Available(), linkop.HealthNoLinks)
	}
	link("add", h.Links[2])
	link("add", h.Links[3])
	ping(2, 3)
	ping(3, 2)
	if code, body := httpGet(t, health); code != 200 {
		t.Errorf("/healthz with two links: %d %q, want 200", code, body)
	}
	if l := linkList(t, ctl); l.Health != linkop.HealthForwarding || l.HealthDetail != "" || l.Available() != nil {
		t.Errorf("link list with two links: health %q %q, available %v; want %s", l.Health, l.HealthDetail, l.Available(), linkop.HealthForwarding)
	}
	if d.exited() {
		t.Fatalf("daemon exited:\n%s", d.stderr.String())
	}
	d.interrupt()
	if !strings.Contains(d.stderr.String(), "leaked_addresses=0") {
		t.Errorf("stop log without leaked_addresses=0:\n%s", d.stderr.String())
	}
}

// TestLinkAddRefused: `xdpfwd link add` of a link the daemon cannot take
// — one more than --max-links, one whose MTU its frames cannot hold
// (9000 without multi-buffer) — exits 2 with the daemon's reason, a
// definite error, not 1 (a failure to try again); the client sees a
// linkop.RequestError carrying the refusal's code.
func TestLinkAddRefused(t *testing.T) {
	topo.RequireRoot(t)
	ns, err := topo.NewNS("lrf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	base := fmt.Sprintf("xr%d", os.Getpid()%100000)
	up, added, over, big := base+"u", base+"a", base+"o", base+"j"
	for _, l := range []struct {
		name string
		mtu  int
	}{{up, 1500}, {added, 1500}, {over, 1500}, {big, 9000}} {
		for _, args := range [][]string{
			{"link", "add", l.name, "mtu", fmt.Sprint(l.mtu), "type", "veth", "peer", "name", l.name + "p", "netns", ns.Name},
			{"link", "set", l.name, "up"},
			{"-n", ns.Name, "link", "set", l.name + "p", "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
		t.Cleanup(func() { exec.Command("ip", "link", "del", l.name).Run() })
	}
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--link", up, "--max-links", "2", "--multi-buffer", "off", "--stats-interval", "0", "--control", ctl)
	waitSocket(t, d, ctl)
	for _, step := range []struct {
		name   string
		code   int
		stderr string
		is     error
	}{
		{big, exitUsage, "MTU 9000", linkop.ErrMTU},
		{added, exitOK, "", nil},
		{over, exitUsage, "--max-links", linkop.ErrFull},
	} {
		r := runBin(t, 10*time.Second, nil, "link", "add", step.name, "--control", ctl)
		if r.code != step.code || !strings.Contains(r.stderr, step.stderr) {
			t.Errorf("link add %s: exit %d, stderr %q; want exit %d and %q", step.name, r.code, r.stderr, step.code, step.stderr)
		}
		if step.is == nil {
			continue
		}
		c, err := linkop.Dial(ctl)
		if err != nil {
			t.Fatal(err)
		}
		err = c.AddLink(step.name)
		c.Close()
		var re *linkop.RequestError
		if !errors.As(err, &re) || !errors.Is(err, step.is) {
			t.Errorf("AddLink(%s): %v; want a RequestError wrapping %v", step.name, err, step.is)
		}
	}
	d.interrupt()
}

// TestLinkRenamedDaemon: a link renamed while a switch forwards it (ip
// link set name: the same ifindex, its sockets bound) is forwarded on
// under its new name; the next link change, which has the monitor watch
// the links again, took it for deleted and removed it (a link
// renamed is a lifecycle event too).
func TestLinkRenamedDaemon(t *testing.T) {
	h := newHosts(t, 3)
	renamed := h.Links[1] + "r"
	rename := func(from, to string) error {
		for _, args := range [][]string{{"link", "set", from, "down"}, {"link", "set", from, "name", to}, {"link", "set", to, "up"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v: %s", args, err, out)
			}
		}
		return nil
	}
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--link", h.Links[1], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	if err := rename(h.Links[1], renamed); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rename(renamed, h.Links[1]) }) // before the hosts' cleanup, which removes it by name
	waitLog(t, d, "link renamed while forwarding", 10*time.Second)
	linkOp(t, ctl, "add", h.Links[2])
	want := []string{h.Links[0], renamed, h.Links[2]}
	deadline := time.Now().Add(3 * time.Second) // a wrong removal would show within the watch's restart
	for time.Now().Before(deadline) {
		if names := linkNames(t, ctl); !slices.Equal(names, want) {
			t.Fatalf("link list %q after the rename and an add, want %q\n%s", names, want, d.stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, pair := range [][2]int{{1, 0}, {1, 2}} {
		res, err := topo.Ping(h.NS[pair[0]], h.V4[pair[1]], 3, 3*time.Second)
		if err != nil || res.Received == 0 {
			t.Errorf("ping host %d → %d through the renamed link: %d/%d, %v\n%s", pair[0], pair[1], res.Received, res.Sent, err, d.stderr.String())
		}
	}
	d.interrupt()
}

// TestDaemonRestartAddsLinksBack: a switch daemon killed (kill -9: an OOM
// kill, a crash) and started again forwards the links added over its
// control socket before (a node's pods: their veths outlive it, and
// nothing else adds them back), but one deleted while it was down
// (kill -9 of the daemon; its pods were cut off for good).
func TestDaemonRestartAddsLinksBack(t *testing.T) {
	h := newHosts(t, 3)
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	args := []string{"run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4", "--stats-interval", "0", "--control", ctl}
	d := startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	for _, l := range h.Links[1:] {
		linkOp(t, ctl, "add", l)
	}
	if res, err := topo.Ping(h.NS[1], h.V4[0], 3, 3*time.Second); err != nil || res.Received == 0 {
		t.Fatalf("ping before the kill: %d/%d, %v", res.Received, res.Sent, err)
	}
	d.cmd.Process.Kill()
	<-d.done
	if err := h.NS[2].Close(); err != nil { // a pod gone while the daemon was down
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, err := net.InterfaceByName(h.Links[2]); err == nil; _, err = net.InterfaceByName(h.Links[2]) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 10 s after its namespace was deleted", h.Links[2])
		}
		time.Sleep(20 * time.Millisecond)
	}

	d = startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	if names, want := linkNames(t, ctl), []string{h.Links[0], h.Links[1]}; !slices.Equal(names, want) {
		t.Fatalf("after the restart: link list %q, want %q\n%s", names, want, d.stderr.String())
	}
	if res, err := topo.Ping(h.NS[1], h.V4[0], 3, 3*time.Second); err != nil || res.Received == 0 {
		t.Errorf("ping after the restart: %d/%d, %v\n%s", res.Received, res.Sent, err, d.stderr.String())
	}
	if !strings.Contains(d.stderr.String(), "added back") || !strings.Contains(d.stderr.String(), "is gone: not added back") {
		t.Errorf("the restart's log does not say which links it added back and which were gone:\n%s", d.stderr.String())
	}
	d.interrupt()
}

// linkList is the daemon's link list, as the CNI plugin reads it.
func linkList(t *testing.T, ctl string) linkop.List {
	t.Helper()
	c, err := linkop.Dial(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.ListLinks()
	if err != nil {
		t.Fatalf("link list: %v", err)
	}
	return l
}

// TestPrintLinksJSON: `link list --json` says the queues an added link
// needs and, when the workers are pinned, their CPUs (docs/operating.md
// points there for both), besides the mode and the links.
func TestPrintLinksJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		l       linkop.List
		hasCPUs bool
	}{
		{"pinned", linkop.List{Mode: "switch", Queues: 2, CPUs: []int{1}, Links: []linkop.Link{{Name: "up0"}}}, true},
		{"not pinned", linkop.List{Mode: "reflect", Queues: 1, Links: []linkop.Link{{Name: "up0"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := printLinks(&b, tc.l, true); err != nil {
				t.Fatal(err)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal([]byte(b.String()), &raw); err != nil {
				t.Fatalf("%s: %v", b.String(), err)
			}
			var got struct {
				Mode   string        `json:"mode"`
				Queues int           `json:"queues"`
				CPUs   []int         `json:"cpus"`
				Links  []linkop.Link `json:"links"`
			}
			if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
				t.Fatalf("%s: %v", b.String(), err)
			}
			if _, has := raw["cpus"]; has != tc.hasCPUs || got.Mode != tc.l.Mode || got.Queues != tc.l.Queues ||
				!slices.Equal(got.CPUs, tc.l.CPUs) || len(got.Links) != 1 || got.Links[0].Name != "up0" {
				t.Errorf("printed %s; want mode %s, queues %d, cpus %v (there: %v), link up0", b.String(), tc.l.Mode, tc.l.Queues, tc.l.CPUs, tc.hasCPUs)
			}
		})
	}
}
