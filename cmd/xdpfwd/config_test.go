package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestConfigAndReload runs xdpfwd from a YAML file, changes the file, and
// sends SIGHUP: the queue count, xps mode and inline limit change without a
// restart, a frame-size change is reported as needing one, and a flag given
// on the command line keeps overriding the file.
func TestConfigAndReload(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{Queues: 2})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "xdpfwd.yaml")
	sum := filepath.Join(dir, "s.json")
	write := func(s string) {
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("link: [%s, %s]\nqueues: 2\nxps: sticky\ninline-max: 256\nstats-interval: 0s\nlog-level: info\n", p.LinkA, p.LinkB))
	pr := startBin(t, "run", "--config", cfg, "--summary", sum, "--log-level", "debug")
	waitAttached(t, pr, p, 5*time.Second)
	pingAcross(t, p, pr)

	write(fmt.Sprintf("link: [%s, %s]\nqueues: 1\nxps: hash\ninline-max: 128\nframe-size: 4096\nstats-interval: 0s\nlog-level: warn\n", p.LinkA, p.LinkB))
	pr.signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(pr.stderr.String(), "config reloaded") {
		if time.Now().After(deadline) || pr.exited() {
			t.Fatalf("no reload logged after SIGHUP; stderr:\n%s", pr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	log := pr.stderr.String()
	for _, want := range []string{"queues=1", "xps=hash", "inline-max=128", "needs_restart=frame-size", "overridden_by_flags=log-level"} {
		if !strings.Contains(log, want) {
			t.Errorf("reload log lacks %q:\n%s", want, log)
		}
	}
	pingAcross(t, p, pr)
	pr.interrupt()

	raw, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	var s fwd.Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.XPS.Mode != "hash" || s.XPS.Queues != 1 {
		t.Errorf("after reload the summary says xps %+v, want mode hash over 1 queue", s.XPS)
	}
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ name, body, want string }{
		{"unknown key", "links: [a, b]\n", `unknown setting "links"`},
		{"not yaml", "link: [a\n", "--config"},
		{"bad value", "queues: many\n", "queues"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
		os.WriteFile(path, []byte(c.body), 0o644)
		r := runBin(t, 10*time.Second, nil, "run", "--config", path)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", c.name, r.code, r.stderr, c.want)
		}
	}
	r := runBin(t, 10*time.Second, nil, "run", "--config", filepath.Join(dir, "missing.yaml"))
	if r.code != 2 {
		t.Errorf("missing config file: exit %d, want 2", r.code)
	}
}

// TestReloadQueuesDefault: `queues: 0` (or removing the key) on reload
// means what it means at start, the default: the CPUs the process may use,
// at most the links' queue count (and, live, at most the workers started).
// The daemon runs on one allowed CPU (inherited from the thread that
// starts it), so the default is 1 whatever the machine, with two workers
// started by `queues: 2`.
func TestReloadQueuesDefault(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{Queues: 2})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "xdpfwd.yaml")
	sum := filepath.Join(dir, "s.json")
	write := func(s string) {
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("link: [%s, %s]\nqueues: 2\nstats-interval: 0s\n", p.LinkA, p.LinkB))
	pr := startOnOneCPU(t, "run", "--config", cfg, "--summary", sum)
	waitAttached(t, pr, p, 5*time.Second)
	write(fmt.Sprintf("link: [%s, %s]\nqueues: 0\nstats-interval: 0s\n", p.LinkA, p.LinkB))
	pr.signal(syscall.SIGHUP)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(pr.stderr.String(), "config reloaded"); {
		if time.Now().After(deadline) || pr.exited() {
			t.Fatalf("no reload logged after SIGHUP; stderr:\n%s", pr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	pingAcross(t, p, pr)
	pr.interrupt()
	raw, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	var s fwd.Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("after reload with queues: 0: xps %+v", s.XPS)
	if s.XPS.Queues != 1 {
		t.Errorf("reload with queues: 0 spread flows over %d TX queues, want 1 (the default on one allowed CPU)", s.XPS.Queues)
	}
}

// startOnOneCPU is startBin with the child allowed the first CPU this
// process may use only: it inherits the affinity of the thread that forks
// it, which is this goroutine's, locked and restored after.
func startOnOneCPU(t *testing.T, args ...string) *proc {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	for c := range 1024 {
		if old.IsSet(c) {
			one.Set(c)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &old)
	return startBin(t, args...)
}
