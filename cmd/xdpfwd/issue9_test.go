package main

// Issue 9: SIGHUP before forwarding starts, --multi-buffer auto, --ring-size,
// and reloads that fail or outlive a --wait-for-links rebuild.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// waitCount waits until stderr contains s at least n times.
func waitCount(t *testing.T, pr *proc, s string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for strings.Count(pr.stderr.String(), s) < n {
		if pr.exited() {
			t.Fatalf("xdpfwd exited %d before logging %q %d times\nstderr:\n%s", pr.cmd.ProcessState.ExitCode(), s, n, pr.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdpfwd did not log %q %d times within %v\nstderr:\n%s", s, n, within, pr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSIGHUPWhileWaiting: a SIGHUP while --wait-for-links waits for a
// link that is not there yet neither kills the daemon (exit 129, which
// systemd's Restart=on-failure counts as clean) nor is lost: it is logged
// as queued and applied once forwarding starts. SIGTERM while waiting
// exits 0.
func TestSIGHUPWhileWaiting(t *testing.T) {
	t.Parallel()
	t.Run("no-config", func(t *testing.T) {
		t.Parallel()
		p := newPair(t, topo.Options{})
		deleteLink(t, p.LinkB)
		pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--wait-for-links")
		waitLog(t, pr, "waiting for the links to exist", 10*time.Second)
		pr.signal(syscall.SIGHUP)
		waitLog(t, pr, "reload queued until forwarding starts", 10*time.Second)
		pr.signal(syscall.SIGTERM)
		if code := pr.wait(10 * time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM while waiting for %s, want 0\nstderr:\n%s", code, p.LinkB, pr.stderr.String())
		}
		checkNoPanic(t, "stderr", pr.stderr.String())
		checkDetached(t, p.LinkA)
	})
	t.Run("config", func(t *testing.T) {
		t.Parallel()
		p := newPair(t, topo.Options{})
		mac := peerMAC(t, p.B)
		deleteLink(t, p.LinkB)
		cfg := filepath.Join(t.TempDir(), "xdpfwd.yaml")
		write := func(s string) {
			if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		base := fmt.Sprintf("link: [%s, %s]\nwait-for-links: true\nstats-interval: 0s\n", p.LinkA, p.LinkB)
		write(base + "inline-max: 256\n")
		pr := startBin(t, "run", "--config", cfg)
		waitLog(t, pr, "waiting for the links to exist", 10*time.Second)
		write(base + "inline-max: 128\n")
		pr.signal(syscall.SIGHUP)
		waitLog(t, pr, "reload queued until forwarding starts", 10*time.Second)

		recreateB(t, p, mac)
		waitReady(t, pr, p, 1, 10*time.Second)
		waitLog(t, pr, "config reloaded", 10*time.Second)
		if log := pr.stderr.String(); !strings.Contains(log, `applied="inline-max=128"`) {
			t.Errorf("the queued reload did not apply inline-max=128:\n%s", log)
		}
		pingAcross(t, p, pr)
		pr.interrupt()
		checkDetached(t, p.LinkA, p.LinkB)
	})
}

// TestReloadRetriesFailedKey: a key a reload could not apply is reported
// and stays pending: the next SIGHUP, with the file unchanged, tries it
// again instead of taking the file as applied.
func TestReloadRetriesFailedKey(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{}) // one queue: "queues: 2" cannot apply
	cfg := filepath.Join(t.TempDir(), "xdpfwd.yaml")
	base := fmt.Sprintf("link: [%s, %s]\nstats-interval: 0s\n", p.LinkA, p.LinkB)
	if err := os.WriteFile(cfg, []byte(base+"queues: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pr := startBin(t, "run", "--config", cfg)
	waitAttached(t, pr, p, 10*time.Second)
	if err := os.WriteFile(cfg, []byte(base+"queues: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Each reload reports the failure once; before the fix the second
	// reload took the file as applied and tried nothing.
	const failure = "queues 2: want 1..1"
	for n := 1; n <= 2; n++ {
		pr.signal(syscall.SIGHUP)
		waitCount(t, pr, `msg="config reloaded"`, n, 10*time.Second)
		waitCount(t, pr, failure, n, 10*time.Second)
	}
	for _, l := range strings.Split(pr.stderr.String(), "\n") {
		if strings.Contains(l, `msg="config reloaded"`) && strings.Contains(l, "queues=") {
			t.Errorf("a reload says it applied queues:\n%s", l)
		}
	}
	pingAcross(t, p, pr)
	pr.interrupt()
}

// TestReloadSurvivesRelinking: the forwarder --wait-for-links rebuilds
// after a link was deleted and re-created runs with the settings a reload
// applied, not with those it started with.
func TestReloadSurvivesRelinking(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	mac := peerMAC(t, p.B)
	dir := t.TempDir()
	cfg, sum := filepath.Join(dir, "xdpfwd.yaml"), filepath.Join(dir, "s.json")
	base := fmt.Sprintf("link: [%s, %s]\nwait-for-links: true\nstats-interval: 0s\nsummary: %s\n", p.LinkA, p.LinkB, sum)
	if err := os.WriteFile(cfg, []byte(base+"inline-max: 256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pr := startBin(t, "run", "--config", cfg)
	waitReady(t, pr, p, 1, 10*time.Second)
	// inline-max off: the inline path off, which the summary's TX paths show.
	if err := os.WriteFile(cfg, []byte(base+"inline-max: off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pr.signal(syscall.SIGHUP)
	waitLog(t, pr, `applied="inline-max=off"`, 10*time.Second)

	deleteLink(t, p.LinkB)
	waitLog(t, pr, "waiting for both to return", 10*time.Second)
	recreateB(t, p, mac)
	waitReady(t, pr, p, 2, 10*time.Second)
	pingAcross(t, p, pr)
	pr.interrupt()
	checkDetached(t, p.LinkA, p.LinkB)

	raw, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	var s fwd.Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("summary: %v\n%s", err, raw)
	}
	t.Logf("TX paths of the rebuilt forwarder: %v", s.TXPaths)
	if s.TXPaths["inline"] != 0 || s.TXPaths["frame"] == 0 {
		t.Errorf("the rebuilt forwarder sent %d packets inline and %d from their frame: it runs with inline-max 256 from start-up, not the reloaded off\nstderr:\n%s",
			s.TXPaths["inline"], s.TXPaths["frame"], pr.stderr.String())
	}
}

// TestMultiBufferAuto: a link with MTU 9000 and no --multi-buffer starts
// with multi-buffer on, says why, and forwards a jumbo frame; with
// --multi-buffer off (either spelling) the same links are an input error.
func TestMultiBufferAuto(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{MTU: 9000})
	for _, off := range [][]string{{"--multi-buffer", "off"}, {"--multi-buffer=false"}} {
		args := append([]string{"run", "--link", p.LinkA, "--link", p.LinkB}, off...)
		r := runBin(t, 30*time.Second, nil, args...)
		t.Logf("%s: exit %d\nstderr:\n%s", strings.Join(off, " "), r.code, r.stderr)
		if r.code != 2 {
			t.Errorf("%s with MTU 9000: exit %d, want 2", strings.Join(off, " "), r.code)
		}
		for _, w := range []string{"MTU 9000", "2048", "multi-buffer"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: the message does not mention %q", strings.Join(off, " "), w)
			}
		}
		checkDetached(t, p.LinkA, p.LinkB)
	}

	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0")
	waitAttached(t, pr, p, 10*time.Second)
	if log := pr.stderr.String(); !strings.Contains(log, `msg="multi-buffer on"`) || !strings.Contains(log, "MTU 9000") {
		t.Errorf("no log line says multi-buffer is on because of MTU 9000:\n%s", log)
	}
	res, err := topo.SendFrames(p.A, p.B, []int{9014, 4000, 60}, 10*time.Second)
	if err != nil {
		t.Fatalf("send jumbo frames: %v\nstderr:\n%s", err, pr.stderr.String())
	}
	if res.Matched != res.Sent {
		t.Errorf("%d of %d frames arrived intact (missing %v, altered %v)", res.Matched, res.Sent, res.Missing, res.Mismatch)
	}
	pr.interrupt()
	checkDetached(t, p.LinkA, p.LinkB)
}

// TestMultiBufferFlag: --multi-buffer takes auto|on|off, and the boolean
// forms it had: bare, =true, =false; in process, no links needed.
func TestMultiBufferFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want fwd.MultiBufferMode
	}{
		{nil, fwd.MultiBufferAuto},
		{[]string{"--multi-buffer"}, fwd.MultiBufferOn},
		{[]string{"--multi-buffer", "--queues", "1"}, fwd.MultiBufferOn},
		{[]string{"--queues", "1", "--multi-buffer"}, fwd.MultiBufferOn},
		{[]string{"--multi-buffer=true"}, fwd.MultiBufferOn},
		{[]string{"--multi-buffer=false"}, fwd.MultiBufferOff},
		{[]string{"--multi-buffer", "off"}, fwd.MultiBufferOff},
		{[]string{"-multi-buffer", "on"}, fwd.MultiBufferOn},
		{[]string{"--multi-buffer", "auto"}, fwd.MultiBufferAuto},
		{[]string{"--multi-buffer=off"}, fwd.MultiBufferOff},
		{[]string{"--summary", "--multi-buffer", "--multi-buffer", "off"}, fwd.MultiBufferOff},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		var ff fwdFlags
		ff.register(fs, true)
		fs.String("summary", "", "")
		if err := parseFlags(fs, c.args, &bytes.Buffer{}); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		cfg, _, err := ff.config(&bytes.Buffer{})
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if cfg.MultiBufferMode != c.want {
			t.Errorf("%q: mode %v, want %v", c.args, cfg.MultiBufferMode, c.want)
		}
	}
	// YAML: the booleans it had, and the three words.
	dir := t.TempDir()
	for body, want := range map[string]fwd.MultiBufferMode{
		"multi-buffer: true\n":  fwd.MultiBufferOn,
		"multi-buffer: false\n": fwd.MultiBufferOff,
		"multi-buffer: on\n":    fwd.MultiBufferOn,
		"multi-buffer: off\n":   fwd.MultiBufferOff,
		"multi-buffer: auto\n":  fwd.MultiBufferAuto,
	} {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		var ff fwdFlags
		ff.register(fs, true)
		if _, err := applyConfigFile(fs, path); err != nil {
			t.Errorf("%q: %v", body, err)
			continue
		}
		if ff.multiBuffer.mode != want {
			t.Errorf("%q: mode %v, want %v", body, ff.multiBuffer.mode, want)
		}
	}
	for _, args := range [][]string{{"--multi-buffer=maybe"}, {"--multi-buffer", "maybe"}} {
		var stderr bytes.Buffer
		if code := run(append([]string{"run"}, args...), &bytes.Buffer{}, &stderr); code != exitUsage {
			t.Errorf("%q: exit %d, want 2; stderr %q", args, code, stderr.String())
		}
	}
}

// TestRingSizeFlag: --ring-size (and ring-size: in a config file) takes 0
// (auto) or a power of two in 64..16384; anything else exits 2 saying so.
func TestRingSizeFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want uint32
	}{
		{nil, 0},
		{[]string{"--ring-size", "0"}, 0},
		{[]string{"--ring-size", "64"}, 64},
		{[]string{"--ring-size=4096"}, 4096},
		{[]string{"--ring-size", "16384"}, 16384},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		var ff fwdFlags
		ff.register(fs, true)
		if err := parseFlags(fs, c.args, &bytes.Buffer{}); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		cfg, _, err := ff.config(&bytes.Buffer{})
		if err != nil || cfg.RingSize != c.want {
			t.Errorf("%q: ring size %d, %v; want %d", c.args, cfg.RingSize, err, c.want)
		}
	}
	dir := t.TempDir()
	for _, v := range []string{"32", "100", "32768", "-64", "many"} {
		var stderr bytes.Buffer
		code := run([]string{"run", "--link", "a", "--link", "b", "--ring-size", v}, &bytes.Buffer{}, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "ring-size") {
			t.Errorf("--ring-size %s: exit %d, stderr %q; want 2 naming --ring-size", v, code, stderr.String())
		}
		path := filepath.Join(dir, "c.yaml")
		os.WriteFile(path, []byte("link: [a, b]\nring-size: "+v+"\n"), 0o644)
		stderr.Reset()
		code = run([]string{"run", "--config", path}, &bytes.Buffer{}, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "ring-size") {
			t.Errorf("ring-size: %s in a config file: exit %d, stderr %q; want 2 naming ring-size", v, code, stderr.String())
		}
	}
}
