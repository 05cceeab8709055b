package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/umem"
)

// restoring is a controlSocket on a fake switch forwarding up0 (its
// --link), whose state file is SOCKET.links in a directory of the test's,
// ready for restoreLinks.
type restoring struct {
	cs  *controlSocket
	f   *fwd.Forwarder
	sw  *modes.Switch
	log *bytes.Buffer
}

// Its state files name lo: the one link net.InterfaceByName, which
// restoreLinks asks first, finds in any namespace; the fake environment
// has one of that name for the forwarder to add.
const restoredLink = "lo"

// newRestoring builds a restoring in mode ("switch": with the switch as
// its ports' keeper; another: none).
func newRestoring(t *testing.T, mode string) *restoring {
	t.Helper()
	env := fwdtest.New()
	env.AddLink("up0", fwdtest.LinkOptions{})
	env.AddLink(restoredLink, fwdtest.LinkOptions{})
	sw := modes.NewSwitch(4, 1024, 0)
	f, err := fwd.New(fwd.Config{Links: []string{"up0"}, Handler: sw, MaxLinks: 4, Queues: 1, Env: env, HugePages: umem.HugePagesOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r := &restoring{f: f, sw: sw, log: &bytes.Buffer{}}
	r.cs = &controlSocket{mode: mode, state: linkStateFile(filepath.Join(t.TempDir(), "ctl.sock")), given: []string{"up0"}}
	if mode == "switch" {
		r.cs.sw = sw
	}
	return r
}

// restore runs restoreLinks, which must return within a few seconds:
// false, and the test failed, if it did not.
func (r *restoring) restore(t *testing.T) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.cs.restoreLinks(r.f, r.cs.given, slog.New(slog.NewJSONHandler(r.log, nil)))
	}()
	select {
	case <-done:
		return true
	case <-time.After(5 * time.Second):
		t.Errorf("restoreLinks of %s still running after 5 s: a daemon starting would hang there", r.cs.state)
		return false
	}
}

// errorsLogged are the messages and errs of the records logged at level
// ERROR.
func (r *restoring) errorsLogged(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(r.log.String()), "\n") {
		if line == "" {
			continue
		}
		var rec struct{ Level, Msg, File, Err string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Level == "ERROR" {
			out = append(out, rec.Msg+": file="+rec.File+" err="+rec.Err)
		}
	}
	return out
}

// goodLinkState is what a daemon writes for lo added over its socket with
// a pod's MAC.
const goodLinkState = `{"added":["lo"],"ports":{"lo":{"mac":"02:00:00:00:00:01"}}}` + "\n"

// TestLinkStateUntrusted: the link state file beside a control socket in
// a directory others can write (a sticky /tmp) may be anyone's plant: a
// FIFO hung the daemon's start (deaf to SIGTERM), a symlink to /dev/zero
// read until memory ran out, and another user's file, or one others can
// write, had its links added back with the ports it chose. Each is now
// refused, promptly, with an error naming the file and why, and nothing
// it lists is added; the daemon's next save replaces it (the plant itself,
// never a symlink's target). The daemon's own file restores.
func TestLinkStateUntrusted(t *testing.T) {
	// writeGood writes the daemon's kind of file at path, mode 0600.
	writeGood := func(t *testing.T, path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(goodLinkState), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		root  bool // chown
		plant func(t *testing.T, state string)
		// cause is what the error logged must say; "" for the good file,
		// which restores.
		cause string
	}{
		{"fifo", false, func(t *testing.T, state string) {
			if err := syscall.Mkfifo(state, 0o600); err != nil {
				t.Fatal(err)
			}
			// A reader blocked in its open (the hang) gets EOF: the
			// test's goroutine ends with it.
			t.Cleanup(func() {
				if fd, err := syscall.Open(state, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					syscall.Close(fd)
				}
			})
		}, "not a regular file"},
		{"symlink to /dev/zero", false, func(t *testing.T, state string) {
			if err := os.Symlink("/dev/zero", state); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"symlink to a good file", false, func(t *testing.T, state string) {
			writeGood(t, state+".target")
			if err := os.Symlink(state+".target", state); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"hard link to a good file", false, func(t *testing.T, state string) {
			writeGood(t, state+".target")
			if err := os.Link(state+".target", state); err != nil {
				t.Fatal(err)
			}
		}, "hard link"},
		{"another user's", true, func(t *testing.T, state string) {
			writeGood(t, state)
			if err := os.Chown(state, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
		{"group-writable", false, func(t *testing.T, state string) {
			writeGood(t, state)
			if err := os.Chmod(state, 0o620); err != nil {
				t.Fatal(err)
			}
		}, "writable by group or others"},
		{"others-writable", false, func(t *testing.T, state string) {
			writeGood(t, state)
			if err := os.Chmod(state, 0o602); err != nil {
				t.Fatal(err)
			}
		}, "writable by group or others"},
		{"oversized", false, func(t *testing.T, state string) {
			// Valid JSON all the same: only its size refuses it.
			b := append([]byte(strings.TrimSpace(goodLinkState)), bytes.Repeat([]byte(" "), maxLinkStateSize)...)
			if err := os.WriteFile(state, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "bytes, more than"},
		{"good", false, writeGood, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				topo.RequireRoot(t)
			}
			r := newRestoring(t, "switch")
			state := r.cs.state
			tc.plant(t, state)
			target, _ := os.ReadFile(state + ".target")
			if !r.restore(t) {
				return
			}
			added := slices.Contains(r.f.Links(), restoredLink)
			_, secured := r.sw.Ports()[restoredLink]
			errs := r.errorsLogged(t)
			if tc.cause == "" {
				if !added || !secured || len(errs) > 0 {
					t.Fatalf("the daemon's own file: %s added %v, secured %v, errors %q; want added back secured, no error\n%s", restoredLink, added, secured, errs, r.log)
				}
				return
			}
			if added || secured {
				t.Errorf("%s added %v, secured %v from an untrusted file; want neither", restoredLink, added, secured)
			}
			if len(errs) != 1 || !strings.Contains(errs[0], "link state untrusted") || !strings.Contains(errs[0], "file="+state) || !strings.Contains(errs[0], tc.cause) {
				t.Errorf("errors logged %q; want one, \"link state untrusted\", naming %s and saying %q\n%s", errs, state, tc.cause, r.log)
			}
			// The next save (a link change) replaces the plant with the
			// daemon's own file, and leaves a symlink's target alone.
			if err := r.cs.saveLinks(r.f, r.cs.given); err != nil {
				t.Fatalf("save after the refusal: %v", err)
			}
			b, err := readLinkState(state)
			var doc linkStateDoc
			if err != nil || json.Unmarshal(b, &doc) != nil || len(doc.Added) != 0 {
				t.Errorf("state file after the next save: %q, %v; want the daemon's own, no links", b, err)
			}
			if after, _ := os.ReadFile(state + ".target"); !bytes.Equal(after, target) {
				t.Errorf("the save changed the plant's target: %q, was %q", after, target)
			}
		})
	}
}

// TestLinkStateMalformed: a state file that can be trusted (the daemon's
// user's) but says what the daemon never writes is refused, whole or link
// by link, with an error, never a panic, and adds nothing it cannot add
// as the file says: no link unsecured or unpoliced that it lists with
// ports or limits, no port security lost to a link listed twice.
func TestLinkStateMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, mode, content string
		added, secured      bool
		// err is what an error logged must say ("": none logged).
		err string
	}{
		{"not JSON", "switch", `{"added":["lo"]`, false, false, "unexpected end of JSON"},
		{"a number for a name", "switch", `{"added":[1]}`, false, false, "cannot unmarshal number"},
		{"bad MAC", "switch", `{"added":["lo"],"ports":{"lo":{"mac":"zz:00"}}}`, false, false, `mac "zz:00"`},
		{"no MAC", "switch", `{"added":["lo"],"ports":{"lo":{}}}`, false, false, "needs the pod's MAC"},
		{"bad IP", "switch", `{"added":["lo"],"ports":{"lo":{"mac":"02:00:00:00:00:01","ips":["10.0.0.300"]}}}`, false, false, `ip "10.0.0.300"`},
		{"rate without burst", "switch", `{"added":["lo"],"limits":{"lo":{"ingress_rate":1000000}}}`, false, false, "want both or neither"},
		{"ports outside switch mode", "reflect", `{"added":["lo"],"ports":{"lo":{"mac":"02:00:00:00:00:01"}}}`, false, false, "port security is a switch's"},
		{"limits outside switch mode", "reflect", `{"added":["lo"],"limits":{"lo":{"ingress_rate":1000000,"ingress_burst":524288}}}`, false, false, "bandwidth limits are a switch's"},
		{"no limits outside switch mode", "reflect", `{"added":["lo"],"limits":{"lo":{}}}`, true, false, ""},
		{"listed twice", "switch", `{"added":["lo","lo"],"ports":{"lo":{"mac":"02:00:00:00:00:01"}}}`, true, true, "listed twice"},
		{"the --link link", "switch", `{"added":["up0"]}`, false, false, ""},
		{"no such link", "switch", `{"added":["xdpfwd-none0"]}`, false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestoring(t, tc.mode)
			if err := os.WriteFile(r.cs.state, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			// A panic ends the test binary: the daemon's start would end.
			if !r.restore(t) {
				return
			}
			added := slices.Contains(r.f.Links(), restoredLink)
			_, secured := r.sw.Ports()[restoredLink]
			if added != tc.added || secured != tc.secured {
				t.Errorf("%s: %s added %v, secured %v; want %v, %v\n%s", tc.content, restoredLink, added, secured, tc.added, tc.secured, r.log)
			}
			errs := r.errorsLogged(t)
			if tc.err == "" && len(errs) > 0 || tc.err != "" && (len(errs) != 1 || !strings.Contains(errs[0], tc.err)) {
				t.Errorf("%s: errors logged %q; want %q\n%s", tc.content, errs, tc.err, r.log)
			}
			if tc.secured {
				// What the file is written as next keeps the port.
				b, _ := os.ReadFile(r.cs.state)
				if !strings.Contains(string(b), `"ports":{"lo"`) {
					t.Errorf("state file written after the restore: %s; want lo's port kept", b)
				}
			}
		})
	}
}

// TestLinkStateDirWarned: a control socket in a directory others may
// write and that is not sticky is said to be: anyone may replace the
// socket and its state file there. A sticky one (/tmp) or the daemon's
// own is not.
func TestLinkStateDirWarned(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{
		{0o700, false},
		{0o755, false},
		{0o777 | os.ModeSticky, false},
		{0o777, true},
		{0o770, true},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			r := newRestoring(t, "switch")
			dir := filepath.Dir(r.cs.state)
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			if !r.restore(t) {
				return
			}
			warned := strings.Contains(r.log.String(), `"level":"WARN"`) && strings.Contains(r.log.String(), dir)
			if warned != tc.warn {
				t.Errorf("directory mode %v: warned %v, want %v\n%s", tc.mode, warned, tc.warn, r.log)
			}
		})
	}
}

// TestDaemonStartsPastPlantedLinkState: with its control socket in a
// sticky directory anyone may write (/tmp), a daemon whose state file
// another user planted (a FIFO, which hung its start deaf to SIGTERM;
// their own file, whose links it added back) logs it as untrusted, gets
// ready forwarding only its --link, replaces the plant with its own file
// at the next link change, and stops on SIGTERM.
func TestDaemonStartsPastPlantedLinkState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, state, pod string)
	}{
		{"fifo", func(t *testing.T, state, _ string) {
			if err := syscall.Mkfifo(state, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(state, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"another user's file", func(t *testing.T, state, pod string) {
			if err := os.WriteFile(state, []byte(`{"added":["`+pod+`"]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(state, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHosts(t, 2)
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
				t.Fatal(err)
			}
			ctl := filepath.Join(dir, "ctl.sock")
			state := linkStateFile(ctl)
			tc.plant(t, state, h.Links[1])
			d := startBin(t, "run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4", "--stats-interval", "0", "--control", ctl)
			waitLog(t, d, readyMsg, 20*time.Second)
			waitSocket(t, d, ctl)
			if names, want := linkNames(t, ctl), []string{h.Links[0]}; !slices.Equal(names, want) {
				t.Fatalf("link list %q after a start past a planted state file, want %q\n%s", names, want, d.stderr.String())
			}
			// Said before the socket served the list.
			if !strings.Contains(d.stderr.String(), "link state untrusted") {
				t.Errorf("no \"link state untrusted\" logged for the plant:\n%s", d.stderr.String())
			}
			linkOp(t, ctl, "add", h.Links[1])
			b, err := readLinkState(state)
			var doc linkStateDoc
			if err != nil || json.Unmarshal(b, &doc) != nil || !slices.Equal(doc.Added, []string{h.Links[1]}) {
				t.Errorf("state file after a link add: %q, %v; want the daemon's own, listing %s", b, err, h.Links[1])
			}
			d.signal(syscall.SIGTERM)
			if code := d.wait(15 * time.Second); code != 0 {
				t.Errorf("exit %d after SIGTERM, want 0\n%s", code, d.stderr.String())
			}
		})
	}
}

// TestReloadConfigLinksNotSaved: the state file lists the links added
// over the control socket, not those of the config file. A link a
// SIGHUP's reload added from the file was written there as one added over
// the socket, and so was one added over the socket that the file took up
// since: dropped from the file and reloaded, both were gone until the
// daemon restarted and added them back. The file is the config's to add
// and drop: the reload rewrites the state file without them, a reload that
// drops them removes them (and the port security one had), and a restart
// does not bring them back; the socket's own link comes back as ever.
func TestReloadConfigLinksNotSaved(t *testing.T) {
	h := newHosts(t, 5)
	up, fromFile, adopted, pod, later := h.Links[0], h.Links[1], h.Links[2], h.Links[3], h.Links[4]
	dir := t.TempDir()
	ctl, cfg := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "xdpfwd.yaml")
	state := linkStateFile(ctl)
	writeConfig := func(links ...string) {
		t.Helper()
		s := fmt.Sprintf("mode: switch\nqueues: 1\nmax-links: 8\nstats-interval: 0s\ncontrol: %s\nlink: [%s]\n", ctl, strings.Join(links, ", "))
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reloads := 0
	reload := func(d *proc, links ...string) {
		t.Helper()
		writeConfig(links...)
		d.signal(syscall.SIGHUP)
		reloads++
		waitCount(t, d, "config reloaded", reloads, 10*time.Second)
		if strings.Contains(d.stderr.String(), "config reload: ") {
			t.Fatalf("reload to %q failed:\n%s", links, d.stderr.String())
		}
	}
	// saved waits for the state file to list want (a reload writes it
	// after its log line); it fails with what it lists.
	saved := func(when string, want ...string) {
		t.Helper()
		var doc linkStateDoc
		deadline := time.Now().Add(5 * time.Second)
		for {
			b, err := readLinkState(state)
			doc = linkStateDoc{}
			if err == nil && json.Unmarshal(b, &doc) == nil && slices.Equal(doc.Added, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: state file %q, %v; want it to list %q", when, b, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	listed := func(when string, want ...string) {
		t.Helper()
		if names := linkNames(t, ctl); !slices.Equal(names, want) {
			t.Fatalf("%s: link list %q, want %q", when, names, want)
		}
	}
	mac, err := h.NS[2].HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}

	writeConfig(up)
	d := startBin(t, "run", "--config", cfg)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	linkOp(t, ctl, "add", pod)
	if r := runBin(t, 10*time.Second, nil, "link", "add", adopted, "--mac", mac.String(), "--control", ctl); r.code != 0 {
		t.Fatalf("link add %s --mac %s: exit %d, %s", adopted, mac, r.code, r.stderr)
	}
	saved("after two adds over the socket", pod, adopted)

	reload(d, up, fromFile, adopted)
	listed("after the file took up two links", up, pod, adopted, fromFile)
	saved("after the file took up two links", pod)
	linkOp(t, ctl, "add", later) // a save after the reload's
	saved("after an add over the socket after the reload", pod, later)

	reload(d, up)
	listed("after the file dropped them", up, pod, later)
	saved("after the file dropped them", pod, later)
	// Its port security went with it: added again over the socket,
	// without a MAC, it learns freely.
	linkOp(t, ctl, "add", adopted)
	for _, k := range linkList(t, ctl).Links {
		if k.Name == adopted && k.MAC != "" {
			t.Errorf("%s added again without a MAC after the file dropped it: secured with %s, want not", adopted, k.MAC)
		}
	}
	linkOp(t, ctl, "del", adopted)

	d.cmd.Process.Kill()
	<-d.done
	d = startBin(t, "run", "--config", cfg)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	listed("after a restart", up, pod, later)
	d.interrupt()
}
