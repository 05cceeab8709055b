package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// newPodL28 makes a pod namespace "...-l28NAME", closed at the test's end.
func (r *rig) newPodL28(name string) *topo.NS {
	r.t.Helper()
	return r.podNS("l28" + name)
}

// pluginRun runs the plugin as a runtime does (execPlugin), with more
// environment, and waits for it at most within; it returns stdout, the
// CNI error a failure printed there (nil on success) and how long the
// plugin took.
func (r *rig) pluginRun(cmd string, p *topo.NS, stdin []byte, within time.Duration, env ...string) ([]byte, *types.Error, time.Duration) {
	r.t.Helper()
	c := exec.Command("ip", "netns", "exec", r.node.Name, filepath.Join(r.cniPath, "xdpfwd-cni"))
	c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_PATH="+r.cniPath,
		"CNI_CONTAINERID="+r.containerID(p), "CNI_NETNS="+nsPath(p), "CNI_IFNAME=eth0")
	c.Env = append(c.Env, env...)
	c.Stdin = bytes.NewReader(stdin)
	var stdout, stderr lockedBuilder
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	if err := c.Start(); err != nil {
		r.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(within):
		c.Process.Kill()
		<-exited
		r.t.Fatalf("%s: no answer within %v (killed)\nstdout %s\nstderr %s", cmd, within, stdout.String(), stderr.String())
	}
	took := time.Since(start)
	out := []byte(stdout.String())
	if err == nil {
		return out, nil, took
	}
	te := &types.Error{}
	if json.Unmarshal(out, te) != nil || te.Code == 0 {
		r.t.Fatalf("%s: %v, and no CNI error on stdout: %s\n%s", cmd, err, out, stderr.String())
	}
	return out, te, took
}

// pausedAdd runs ADD of pod p (stdin: its network configuration) with
// the plugin built with the xdpfwdcnitest tag paused after step
// (killpoint_hook.go: it writes its PID, then stops itself), does
// during, lets the plugin go on (SIGCONT) and returns what it printed
// and its CNI error.
func (r *rig) pausedAdd(p *topo.NS, stdin []byte, step string, during func()) ([]byte, *types.Error) {
	r.t.Helper()
	pidFile := filepath.Join(r.t.TempDir(), "plugin.pid")
	type result struct {
		out []byte
		te  *types.Error
	}
	done := make(chan result, 1)
	go func() {
		// Fatal from pluginRun is a Goexit: its deferred send is what
		// the test then waits on.
		var res result
		defer func() { done <- res }()
		res.out, res.te, _ = r.pluginRun("ADD", p, stdin, time.Minute,
			"XDPFWD_CNI_PAUSE_AFTER="+step, "XDPFWD_CNI_PAUSE_PIDFILE="+pidFile)
	}()
	pid := 0
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(pidFile); err == nil && pid == 0 {
			pid, _ = strconv.Atoi(string(b))
		}
		if pid > 0 && processStopped(pid) {
			break
		}
		select {
		case res := <-done:
			r.t.Fatalf("ADD paused after %s: ended before it paused: %s %v", step, res.out, res.te)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("ADD paused after %s: not stopped within 30 s (pid %d)", step, pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	during()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		r.t.Fatalf("SIGCONT to the plugin (%d): %v", pid, err)
	}
	res := <-done
	return res.out, res.te
}

// processStopped reports whether process pid is stopped (state T).
func processStopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}

// TestCNINetnsDeletedMidAdd: the pod's network namespace deleted (as a
// runtime tearing the sandbox down does) while ADD runs, after any of
// its steps: ADD fails with CNI error 8 (invalid network namespace)
// naming the namespace, instead of reporting a pod attached whose
// interface the kernel deletes as soon as the plugin lets go of the
// namespace; the runtime's DEL, or GC without the attachment, then
// succeeds with the namespace's path gone and leaves nothing: no host
// veth, no lease, no state record, no link in xdpfwd's link list. And
// xdpfwd forwards between two other pods before, throughout and after.
// The plugin is built with the xdpfwdcnitest tag, whose killPoint
// pauses it after the step XDPFWD_CNI_PAUSE_AFTER names.
func TestCNINetnsDeletedMidAdd(t *testing.T) {
	r, d := newSwitchRigTags(t, "xdpfwdcnitest")
	conf := r.pluginConf(r.hostLocalIPAM())
	r.writeConflist("1.1.0", conf)
	stdin := r.netConf("1.1.0", conf, nil)
	a, b := r.newPodL28("a"), r.newPodL28("b")
	addrA, addrB := r.add(a), r.add(b)
	reach := func(when string) {
		t.Helper()
		d.running()
		if err := r.reach(a, b, addrB, 1<<16); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
	reach("before")
	for i, step := range addSteps {
		for _, undo := range []string{"DEL", "GC"} {
			p := r.newPodL28(fmt.Sprintf("gone%d%s", i, strings.ToLower(undo)))
			out, te := r.pausedAdd(p, stdin, step, func() {
				if err := p.Close(); err != nil {
					t.Fatalf("delete %s: %v", p.Name, err)
				}
			})
			if te == nil || te.Code != types.ErrInvalidNetNS || !strings.Contains(te.Msg, nsPath(p)) || !strings.Contains(te.Msg, "deleted") || !strings.Contains(te.Msg, strconv.Quote(step)) {
				t.Errorf("ADD with its namespace deleted after %s: %s %v; want CNI error %d saying %s was deleted after %q",
					step, out, te, types.ErrInvalidNetNS, nsPath(p), step)
			}
			t.Logf("namespace deleted after %s: ADD %v; left before %s: %q", step, te, undo, r.leftovers(p))
			switch undo {
			case "DEL":
				if out, te, _ := r.pluginRun("DEL", p, stdin, time.Minute); te != nil {
					t.Errorf("DEL after the namespace went during ADD (after %s): %s %v; want success", step, out, te)
				}
			case "GC":
				if err := r.gc(0, 1); err != nil {
					t.Errorf("GC after the namespace went during ADD (after %s): %v", step, err)
				}
			}
			r.gone(p, netip.Addr{}) // no address was given: leftovers looks for its lease
			if left := r.leftovers(p); len(left) > 0 {
				t.Errorf("namespace deleted during ADD after %s, then %s: %q left", step, undo, left)
			}
			reach(fmt.Sprintf("after the namespace went during ADD (after %s), then %s", step, undo))
		}
	}
	r.attached(a, addrA)
	r.attached(b, addrB)
	r.del(a)
	r.gone(a, addrA)
	r.del(b)
	r.gone(b, addrB)
}

// heldXdpfwd starts xdpfwd in the rig's node with a --summary that is a
// FIFO (as TestCNIReadinessRealDaemon does): at exit its write of the
// summary waits for a reader, after the drain, with its control socket
// still up. release reads the summary, letting it exit, and returns it.
func heldXdpfwd(t *testing.T, r *rig, args ...string) (d *xdpfwdProc, release func() string) {
	t.Helper()
	summary := filepath.Join(r.dir, "summary.fifo")
	if err := unix.Mkfifo(summary, 0o600); err != nil {
		t.Fatal(err)
	}
	// Held open for reading while xdpfwd starts (it opens the file to
	// check it), closed after.
	hold, err := os.OpenFile(summary, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	d = startXdpfwd(t, buildXdpfwd(t, r.dir), r.node, r.ctl, append(args, "--summary", summary)...)
	hold.Close()
	released := false
	release = func() string {
		if released {
			return ""
		}
		released = true
		rd, err := os.OpenFile(summary, os.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return ""
		}
		defer rd.Close()
		rd.SetDeadline(time.Now().Add(15 * time.Second))
		s, _ := bufio.NewReader(rd).ReadString(0)
		return s
	}
	// A test that ends early: a reader for the summary while it stops
	// (cleanups run last first: this one before startXdpfwd's stop).
	t.Cleanup(func() {
		if !released {
			if rd, err := os.OpenFile(summary, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
				d.stop()
				rd.Close()
			}
		}
	})
	return d, release
}

// TestCNIAddFailsFastWhileDaemonDrains: ADD while xdpfwd drains after
// SIGTERM (held there by its --summary FIFO, its control socket up and
// answering link list with health "stopping") fails at once with CNI
// error 11 (try again later) saying why, and builds nothing: no veth, no
// lease, no state record. It used to build the veth and the lease, then
// wait on a link add the draining daemon does not answer (up to
// linkop.AddTimeout), and on the undo's link del as long.
func TestCNIAddFailsFastWhileDaemonDrains(t *testing.T) {
	r := newRig(t, 0)
	r.daemon.srv.Close(time.Second)
	ipIn(t, r.node,
		[]string{"link", "add", "l28up0", "type", "veth", "peer", "name", "l28up0p"},
		[]string{"link", "set", "l28up0", "up"}, []string{"link", "set", "l28up0p", "up"})
	d, release := heldXdpfwd(t, r, "--mode", "switch", "--link", "l28up0", "--max-links", "8")
	r.forwards = d.forwards
	stdin := r.netConf("1.1.0", r.pluginConf(map[string]any{
		"type": "host-local", "dataDir": r.ipamDir,
		"ranges": []any{[]any{map[string]any{"subnet": podSubnet}}},
	}), nil)
	live := r.newPodL28("live")
	if out, te, _ := r.pluginRun("ADD", live, stdin, time.Minute); te != nil {
		t.Fatalf("ADD with xdpfwd forwarding: %s %v", out, te)
	}

	d.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := linkop.Dial(r.ctl)
		if err != nil {
			t.Fatalf("xdpfwd after SIGTERM: %v\n%s", err, d.stderr.String())
		}
		l, err := c.ListLinks()
		c.Close()
		if err == nil && l.Health == linkop.HealthStopping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdpfwd after SIGTERM: link list %+v, %v for 10 s; want health %q\n%s", l, err, linkop.HealthStopping, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p := r.newPodL28("drain")
	// Generous: one link list and the plugin's start, on a machine
	// shared with other tests; the old ADD took linkop.AddTimeout and
	// more.
	const bound = linkop.ListTimeout
	out, te, took := r.pluginRun("ADD", p, stdin, 3*linkop.AddTimeout)
	t.Logf("ADD while xdpfwd drains: %v in %v", te, took.Round(time.Millisecond))
	if te == nil || te.Code != types.ErrTryAgainLater || !strings.Contains(te.Details, "draining") {
		t.Errorf("ADD while xdpfwd drains: %s %v; want CNI error 11 saying it is draining", out, te)
	}
	if took > bound {
		t.Errorf("ADD while xdpfwd drains took %v; want an answer within %v", took, bound)
	}
	if left := r.leftovers(p); len(left) > 0 {
		t.Errorf("ADD while xdpfwd drains: %q left; want nothing built", left)
	}
	// The runtime's DEL that follows a failed ADD: nothing to undo, and
	// a draining daemon does not make it fail.
	if out, te, _ := r.pluginRun("DEL", p, stdin, 3*linkop.AddTimeout); te != nil {
		t.Errorf("DEL after the refused ADD: %s %v", out, te)
	}
	noLeaks(t, "after the refused ADD", []byte(release()))
	select {
	case err := <-d.exited:
		d.done = true
		if err != nil {
			t.Errorf("xdpfwd on SIGTERM: %v\n%s", err, d.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("xdpfwd still running 15 s after its summary was read\n%s", d.stderr.String())
	}
	if out, te, _ := r.pluginRun("DEL", live, stdin, time.Minute); te != nil {
		t.Errorf("DEL with xdpfwd gone: %s %v", out, te)
	}
	if left := r.leftovers(live); len(left) > 0 {
		t.Errorf("after DEL: %q left", left)
	}
}

// TestCNIAddUnavailableDaemon: ADD asks the daemon's link list first and,
// where it says it cannot take the pod, fails before it builds anything:
// 11 (try again later) while it stops or a worker is stalled, 100
// (refused) while it would refuse every link; the CNI error says why.
// It used to build the veth and the lease and then learn it from the
// link add (a stand-in whose add is refused: 100 for all three). Before:
// the IPAM plugin is never called by the ADD (its calls are logged), no
// link add reaches the daemon, and nothing is left.
func TestCNIAddUnavailableDaemon(t *testing.T) {
	r := newRig(t, 1)
	r.daemon.srv.Close(time.Second)
	m := &standIn{}
	serveStandIn(t, r.ctl, m)
	r.forwards = func(string) bool { return false } // the stand-in takes no link
	stdin := r.netConf("1.1.0", r.pluginConf(map[string]any{
		"type": "host-local", "dataDir": r.ipamDir,
		"ranges": []any{[]any{map[string]any{"subnet": podSubnet}}},
	}), nil)
	p := r.pods[0]
	calls := filepath.Join(r.dir, "ipam-calls.log")
	if err := os.WriteFile(calls, nil, 0o644); err != nil { // none yet
		t.Fatal(err)
	}
	loggingPlugin(t, r.cniPath, "host-local", calls)
	for _, tc := range []struct {
		health, detail, addRefused string
		code                       uint
	}{
		{linkop.HealthStopping, "stopping: draining the workers, then exiting", "", types.ErrTryAgainLater},
		{linkop.HealthStalled, "stalled: worker 1: no progress for 5s with packets waiting on its RX rings", "", types.ErrTryAgainLater},
		{linkop.HealthForwarding, "", "the forwarder's UMEM is zero-copy", ErrDaemonRefused},
	} {
		m.set(tc.health, tc.detail, tc.addRefused)
		why := tc.detail + tc.addRefused
		out, te, took := r.pluginRun("ADD", p, stdin, time.Minute)
		if te == nil || te.Code != tc.code || !strings.Contains(te.Details, why) {
			t.Errorf("ADD, daemon %q %q: %s %v; want CNI error %d saying %q", tc.health, why, out, te, tc.code, why)
		}
		if left := r.leftovers(p); len(left) > 0 {
			t.Errorf("ADD, daemon %q %q: %q left; want nothing built", tc.health, why, left)
		}
		for _, c := range pluginCalls(t, calls) {
			if c.command == "ADD" {
				t.Errorf("ADD, daemon %q %q: the IPAM plugin was called (ADD); want the ADD to stop at the daemon's list", tc.health, why)
			}
		}
		if n := m.added(); n != 0 {
			t.Errorf("ADD, daemon %q %q: %d link adds reached the daemon; want none", tc.health, why, n)
		}
		t.Logf("ADD, daemon %q: %v in %v", tc.health, te, took.Round(time.Millisecond))
		if out, te, _ := r.pluginRun("DEL", p, stdin, time.Minute); te != nil {
			t.Errorf("DEL after it, daemon %q: %s %v", tc.health, out, te)
		}
	}
	// The log hears the IPAM plugin: each DEL called it.
	dels := 0
	for _, c := range pluginCalls(t, calls) {
		if c.command == "DEL" {
			dels++
		}
	}
	if dels != 3 {
		t.Errorf("the IPAM plugin's log has %d DELs, want 3 (one per DEL): it does not hear the plugin", dels)
	}
}
