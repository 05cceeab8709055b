package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// standIn is a daemon that answers link list with what the test sets,
// and counts the lists it answered.
type standIn struct {
	mu    sync.Mutex
	l     linkop.List
	lists int
	adds  int // link adds asked
}

func (s *standIn) set(health, detail, addRefused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l = linkop.List{Mode: "switch", Links: []linkop.Link{{Name: "up0"}}, Health: health, HealthDetail: detail, AddRefused: addRefused}
}

func (s *standIn) answered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

func (s *standIn) List() (linkop.List, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	return s.l, nil
}

func (s *standIn) Add(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adds++
	return linkop.ErrUnsupported
}

// added is how many link adds the stand-in was asked.
func (s *standIn) added() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adds
}
func (s *standIn) Del(name string) error { return linkop.ErrUnknownLink }

// serveStandIn serves m's link ops on a control socket at path until the
// test ends; it returns the server.
func serveStandIn(t *testing.T, path string, m linkop.Manager) *control.Server {
	t.Helper()
	srv, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(time.Second) })
	go srv.Serve(func(c net.Conn) {
		op, rc, err := control.ReadOp(c, 5*time.Second)
		if err != nil || !linkop.IsOp(op) {
			c.Close()
			return
		}
		linkop.Serve(rc, m)
	})
	return srv
}

// buildPlugin builds the plugin into dir.
func buildPlugin(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "xdpfwd-cni")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build xdpfwd-cni: %v\n%s", err, out)
	}
	return bin
}

// installer is `xdpfwd-cni install ... --wait-for-daemon SOCKET --sleep`
// running: the container beside the daemon in its DaemonSet's pod.
type installer struct {
	cmd       *exec.Cmd
	stderr    lockedBuilder
	exited    chan struct{} // closed once it has exited, with err
	err       error
	bin, conf string // what it installs: the plugin and the conflist
}

// startInstaller runs plugin's install of a conflist naming ctl, into
// directories of dir, waiting for the daemon on ctl and then sleeping;
// it is killed at the test's end if still running.
func startInstaller(t *testing.T, plugin, dir, ctl, conflist string) *installer {
	t.Helper()
	src := filepath.Join(dir, "10-xdpfwd.conflist")
	if err := os.WriteFile(src, []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	in := &installer{exited: make(chan struct{}),
		bin: filepath.Join(dir, "opt-cni-bin", "xdpfwd-cni"), conf: filepath.Join(dir, "etc-cni-net.d", "10-xdpfwd.conflist")}
	in.cmd = exec.Command(plugin, "install", "--conflist="+src, "--bin-dir="+filepath.Dir(in.bin), "--conf-dir="+filepath.Dir(in.conf),
		"--wait-for-daemon="+ctl, "--sleep")
	in.cmd.Stderr = &in.stderr
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { in.err = in.cmd.Wait(); close(in.exited) }()
	t.Cleanup(func() {
		select {
		case <-in.exited:
		default:
			in.cmd.Process.Kill()
			<-in.exited
		}
	})
	return in
}

// installed reports whether the plugin and the conflist are in place.
func (in *installer) installed() bool {
	_, berr := os.Stat(in.bin)
	_, cerr := os.Stat(in.conf)
	return berr == nil && cerr == nil
}

// untilInstalled polls for the files until deadline; false if they did
// not come.
func (in *installer) untilInstalled(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for !in.installed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return in.installed()
}

// stop sends SIGTERM and returns the exit error (nil: exit 0).
func (in *installer) stop(t *testing.T) error {
	t.Helper()
	in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
		return in.err
	case <-time.After(5 * time.Second):
		t.Fatalf("installer: no exit within 5 s of SIGTERM\n%s", in.stderr.String())
		return nil
	}
}

const readinessConflist = `{"cniVersion":"1.1.0","name":"xdpfwd","plugins":[{"type":"xdpfwd-cni","control":"/run/xdpfwd/eth1.sock","ipam":{"type":"host-local"}}]}`

// TestInstallWaitsForDaemon: `install --wait-for-daemon SOCKET --sleep`
// (the DaemonSet's installer container) writes nothing while no daemon
// answers on the socket, nor while one answers but is not available
// (stopping, stalled, refusing every add), asking again and again; it
// installs the plugin and the conflist once the daemon is available,
// then keeps running, and on SIGTERM exits 0 leaving both in place.
func TestInstallWaitsForDaemon(t *testing.T) {
	dir := t.TempDir()
	plugin := buildPlugin(t, dir)
	ctl := filepath.Join(dir, "ctl.sock")
	in := startInstaller(t, plugin, dir, ctl, readinessConflist)

	// No daemon: the installer says it waits, and installs nothing.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(in.stderr.String(), "waiting for xdpfwd: control socket "+ctl) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(in.stderr.String(), "waiting for xdpfwd: control socket "+ctl) || in.installed() {
		t.Fatalf("no daemon: installer says %q, installed %v; want it waiting, nothing installed", in.stderr.String(), in.installed())
	}

	m := &standIn{}
	serveStandIn(t, ctl, m)
	for _, tc := range []struct{ health, detail, addRefused string }{
		{linkop.HealthStopping, "stopping: draining the workers, then exiting", ""},
		{linkop.HealthStalled, "stalled: worker 0: no progress for 5s", ""},
		{linkop.HealthForwarding, "", "xconnect mode forwards exactly its two links"},
	} {
		m.set(tc.health, tc.detail, tc.addRefused)
		// Two more lists answered: the installer asked at least once
		// since the set.
		n := m.answered() + 2
		deadline := time.Now().Add(5 * time.Second)
		for m.answered() < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if m.answered() < n || in.installed() {
			t.Fatalf("daemon %s %q (add refused %q): %d lists answered, installed %v; want asked again, nothing installed\n%s",
				tc.health, tc.detail, tc.addRefused, m.answered(), in.installed(), in.stderr.String())
		}
	}

	m.set(linkop.HealthNoLinks, "no links: forwarding nothing until a link is added", "")
	start := time.Now()
	if !in.untilInstalled(5 * time.Second) {
		t.Fatalf("daemon available (no links, takes links): nothing installed within 5 s\n%s", in.stderr.String())
	}
	t.Logf("installed %v after the daemon became available (polled every %v)", time.Since(start).Round(time.Millisecond), waitPoll)
	if b, err := os.ReadFile(in.conf); err != nil || string(b) != readinessConflist {
		t.Errorf("installed conflist: %q, %v", b, err)
	}
	if fi, err := os.Stat(in.bin); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("installed plugin: %v, %v", fi, err)
	}
	select {
	case <-in.exited:
		t.Fatalf("installer exited after installing (%v): --sleep keeps it running\n%s", in.err, in.stderr.String())
	default:
	}
	if err := in.stop(t); err != nil {
		t.Errorf("installer on SIGTERM: %v; want exit 0\n%s", err, in.stderr.String())
	}
	if !in.installed() {
		t.Error("installer's exit removed what it installed: the conflist stays (deploy/README.md)")
	}
}

// TestInstallWaitRefusals: bad --wait-for-daemon input exits 2; a
// daemon not available within --timeout exits 1; neither installs.
func TestInstallWaitRefusals(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "10-xdpfwd.conflist")
	os.WriteFile(good, []byte(readinessConflist), 0o600)
	stopping := filepath.Join(dir, "stopping.sock")
	m := &standIn{}
	m.set(linkop.HealthStopping, "stopping: draining the workers, then exiting", "")
	serveStandIn(t, stopping, m)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"negative timeout", []string{"--wait-for-daemon", filepath.Join(dir, "none.sock"), "--timeout", "-1s"}, 2, "--timeout -1s"},
		{"timeout alone", []string{"--timeout", "1s"}, 2, "--timeout is for --wait-for-daemon"},
		{"no daemon", []string{"--wait-for-daemon", filepath.Join(dir, "none.sock"), "--timeout", "300ms"}, 1, "not available within 300ms"},
		{"daemon stopping", []string{"--wait-for-daemon", stopping, "--timeout", "1200ms"}, 1, "stopping: draining"},
		{"plugin only and a conflist", []string{"--plugin-only"}, 2, "not with --conflist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, conf := filepath.Join(t.TempDir(), "bin"), filepath.Join(t.TempDir(), "net.d")
			var stderr strings.Builder
			start := time.Now()
			code := install(append([]string{"--conflist", good, "--bin-dir", bin, "--conf-dir", conf}, tc.args...), &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("exit %d after %v: %q; want %d saying %q", code, time.Since(start), stderr.String(), tc.code, tc.says)
			}
			if _, err := os.Stat(filepath.Join(conf, filepath.Base(good))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("conflist installed: %v", err)
			}
			if _, err := os.Stat(filepath.Join(bin, "xdpfwd-cni")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("plugin installed: %v", err)
			}
		})
	}
}

// TestInstallPluginOnly: --plugin-only (for Multus, whose networks are
// NetworkAttachmentDefinitions) installs the plugin and no conflist,
// once the daemon is available.
func TestInstallPluginOnly(t *testing.T) {
	dir := t.TempDir()
	ctl := filepath.Join(dir, "ctl.sock")
	m := &standIn{}
	m.set(linkop.HealthForwarding, "", "")
	serveStandIn(t, ctl, m)
	bin, conf := filepath.Join(dir, "bin"), filepath.Join(dir, "net.d")
	var stderr strings.Builder
	if code := install([]string{"--plugin-only", "--bin-dir", bin, "--conf-dir", conf, "--wait-for-daemon", ctl, "--timeout", "5s"}, &stderr); code != 0 {
		t.Fatalf("install --plugin-only: exit %d: %s", code, stderr.String())
	}
	if fi, err := os.Stat(filepath.Join(bin, "xdpfwd-cni")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("plugin: %v, %v", fi, err)
	}
	if ents, err := os.ReadDir(conf); !errors.Is(err, os.ErrNotExist) || len(ents) > 0 {
		t.Errorf("--plugin-only wrote into --conf-dir: %v, %v", ents, err)
	}
	if m.answered() == 0 {
		t.Error("--plugin-only --wait-for-daemon installed without asking the daemon")
	}
}

// TestCNIStatusHealth: STATUS, as a runtime asks it (libcni, and
// cnitool), follows the daemon's health in its link list: available
// while it forwards, has no link yet (a switch before its first pod) or
// rebuilds its forwarder; 50 (plugin not available), saying why, while
// it stops, while a worker is stalled, or while it would refuse every
// add.
func TestCNIStatusHealth(t *testing.T) {
	r := newRig(t, 1)
	r.daemon.srv.Close(time.Second)
	m := &standIn{}
	serveStandIn(t, r.ctl, m)
	for _, tc := range []struct {
		health, detail, addRefused string
		ok                         bool
	}{
		{linkop.HealthForwarding, "", "", true},
		{linkop.HealthNoLinks, "no links: forwarding nothing until a link is added", "", true},
		{linkop.HealthRebuilding, "rebuilding the forwarder", "", true},
		{"", "", "", true}, // a daemon that does not say
		{linkop.HealthStopping, "stopping: draining the workers, then exiting", "", false},
		{linkop.HealthStalled, "stalled: worker 1: no progress for 5s with packets waiting on its RX rings", "", false},
		{linkop.HealthForwarding, "", "the forwarder's UMEM is zero-copy", false},
	} {
		m.set(tc.health, tc.detail, tc.addRefused)
		err := r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
			return c.GetStatusNetworkList(context.Background(), list)
		})
		out, cerr := r.cnitoolRun("status", r.pods[0])
		why := tc.detail + tc.addRefused
		var te *types.Error
		switch {
		case tc.ok && (err != nil || cerr != nil):
			t.Errorf("daemon %q %q: STATUS %v, cnitool %v %s; want available", tc.health, why, err, cerr, out)
		case !tc.ok && (!errors.As(err, &te) || te.Code != types.ErrPluginNotAvailable || !strings.Contains(te.Details, why)):
			t.Errorf("daemon %q %q: STATUS %v; want code 50 saying %q", tc.health, why, err, why)
		case !tc.ok && (cerr == nil || !strings.Contains(out, why)):
			t.Errorf("daemon %q %q: cnitool status %v %s; want a failure saying %q", tc.health, why, cerr, out, why)
		}
	}
}

// TestCNIReadinessRealDaemon: the readiness of the DaemonSet, with
// xdpfwd itself: the installer container (install --wait-for-daemon
// --sleep) started before the daemon installs nothing until xdpfwd
// answers on its socket, then the plugin and the conflist, which a
// runtime (cnitool) then uses to ADD a pod that reaches the uplink's
// far end; STATUS is available while xdpfwd forwards, 50 saying
// "stopping" from SIGTERM until xdpfwd is gone (held in its shutdown by
// its --summary, a FIFO the test reads only once it has seen that), and
// 50 once it is gone; the installer outlives it, and exits 0 on SIGTERM
// leaving the network installed.
func TestCNIReadinessRealDaemon(t *testing.T) {
	r := newRig(t, 1)
	r.daemon.srv.Close(time.Second)
	ipIn(t, r.node,
		[]string{"link", "add", "up0", "type", "veth", "peer", "name", "up0p"},
		[]string{"link", "set", "up0", "up"}, []string{"link", "set", "up0p", "up"},
		[]string{"addr", "add", "10.99.0.250/24", "dev", "up0p"})
	xdpfwd := buildXdpfwd(t, r.dir)

	// The installer first, as the kubelet may start it: the conflist the
	// rig wrote is what it installs, into directories the runtime below
	// then reads.
	conflist, err := os.ReadFile(filepath.Join(r.netDir, r.netName+".conflist"))
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(r.netDir, r.netName+".conflist"))
	in := startInstaller(t, filepath.Join(r.cniPath, "xdpfwd-cni"), t.TempDir(), r.ctl, string(conflist))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(in.stderr.String(), "waiting for xdpfwd") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(in.stderr.String(), "waiting for xdpfwd") || in.installed() {
		t.Fatalf("before xdpfwd: installer says %q, installed %v; want it waiting, nothing installed", in.stderr.String(), in.installed())
	}

	// --summary: a FIFO. Held open for reading while xdpfwd starts (it
	// opens the file to check it), closed after: at exit xdpfwd's write
	// then waits for a reader, after the drain, with its control socket
	// still up.
	summary := filepath.Join(r.dir, "summary.fifo")
	if err := unix.Mkfifo(summary, 0o600); err != nil {
		t.Fatal(err)
	}
	hold, err := os.OpenFile(summary, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := startXdpfwd(t, xdpfwd, r.node, r.ctl, "--mode", "switch", "--link", "up0", "--max-links", "8", "--summary", summary)
	t.Cleanup(func() {
		// A test that ends early: a reader for xdpfwd's summary while
		// it stops.
		if rel, err := os.OpenFile(summary, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			d.stop()
			rel.Close()
		}
	})
	r.forwards = d.forwards
	socketAt := time.Now()
	if !in.untilInstalled(5 * time.Second) {
		t.Fatalf("xdpfwd up: nothing installed within 5 s\n%s", in.stderr.String())
	}
	t.Logf("installed %v after xdpfwd's control socket appeared (polled every %v)", time.Since(socketAt).Round(time.Millisecond), waitPoll)
	hold.Close()
	// The runtime reads what was installed: the plugin from the
	// installer's bin directory (with host-local beside it).
	r.cniPath, r.netDir = filepath.Dir(in.bin), filepath.Dir(in.conf)
	if err := os.Symlink(need(t, "host-local", "/usr/lib/cni/host-local", "/opt/cni/bin/host-local"), filepath.Join(r.cniPath, "host-local")); err != nil {
		t.Fatal(err)
	}
	if out, err := r.cnitoolRun("status", r.pods[0]); err != nil {
		t.Errorf("cnitool status, xdpfwd forwarding: %v\n%s", err, out)
	}
	a := r.add(r.pods[0])
	r.attached(r.pods[0], a)
	if err := r.reach(r.pods[0], r.node, netip.MustParseAddr("10.99.0.250"), 1<<20); err != nil {
		t.Errorf("pod to the uplink's far end through xdpfwd: %v", err)
	}

	// SIGTERM: from then until xdpfwd is gone, STATUS is 50 saying so.
	d.cmd.Process.Signal(syscall.SIGTERM)
	var stopping string
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out, err := r.cnitoolRun("status", r.pods[0])
		if err != nil && strings.Contains(out, linkop.HealthStopping) {
			stopping = out
			break
		}
		if err != nil {
			t.Fatalf("cnitool status after SIGTERM, before xdpfwd is gone: %v %s; want 50 saying %q", err, out, linkop.HealthStopping)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if stopping == "" {
		t.Fatalf("cnitool status after SIGTERM: available for 10 s\n%s", d.stderr.String())
	}
	err = r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
		return c.GetStatusNetworkList(context.Background(), list)
	})
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrPluginNotAvailable || !strings.Contains(te.Details, "draining") {
		t.Errorf("STATUS while xdpfwd drains: %v; want code 50 saying it is draining", err)
	}
	t.Logf("cnitool status while xdpfwd stops: %s", strings.SplitN(stopping, "\n", 2)[0])

	// Read the summary: xdpfwd exits.
	rd, err := os.Open(summary)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := bufio.NewReader(rd).ReadString(0)
	rd.Close()
	select {
	case err := <-d.exited:
		d.done = true
		if err != nil {
			t.Errorf("xdpfwd on SIGTERM: %v\n%s", err, d.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("xdpfwd still running 10 s after its summary was read\n%s", d.stderr.String())
	}
	noLeaks(t, "at its stop", []byte(b))
	err = r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
		return c.GetStatusNetworkList(context.Background(), list)
	})
	if !errors.As(err, &te) || te.Code != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with xdpfwd gone: %v; want code 50", err)
	}
	select {
	case <-in.exited:
		t.Fatalf("installer exited with xdpfwd (%v)\n%s", in.err, in.stderr.String())
	default:
	}
	if err := in.stop(t); err != nil || !in.installed() {
		t.Errorf("installer on SIGTERM: %v, installed %v; want exit 0, the network left installed", err, in.installed())
	}
	r.del(r.pods[0])
	r.gone(r.pods[0], a)
}
