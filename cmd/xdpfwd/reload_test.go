package main

// Reloads (SIGHUP) at the edges: before forwarding starts, a key that
// fails to apply, and a forwarder rebuilt under --wait-for-links.

import (
	"encoding/json"
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
