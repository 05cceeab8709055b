package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestModesStatsLine runs the daemon in each mode on the links a mode
// takes, long enough for stats lines, and stops it with SIGTERM: each
// prints its lines (sink with per-queue rates) and exits 0.
func TestModesStatsLine(t *testing.T) {
	topo.RequireRoot(t)
	h, err := topo.NewHosts(3, topo.Options{Queues: 2, TxChecksum: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, c := range []struct {
		mode  string
		links []string
		want  string
	}{
		{"switch", h.Links, h.Links[2] + " rx"},
		{"reflect", h.Links[:1], h.Links[0] + " rx"},
		{"sink", h.Links[:2], "rx pps per queue 0:"},
		{"xconnect", h.Links[:2], h.Links[0] + "→" + h.Links[1]},
	} {
		t.Run(c.mode, func(t *testing.T) {
			args := []string{"run", "--mode", c.mode, "--stats-interval", "200ms"}
			for _, l := range c.links {
				args = append(args, "--link", l)
			}
			cmd := exec.Command(binary(t), args...)
			var out syncBuffer
			cmd.Stderr = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for strings.Count(out.String(), c.want) < 2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGTERM)
			err := cmd.Wait()
			if err != nil || strings.Count(out.String(), c.want) < 2 {
				t.Errorf("--mode %s: exit %v; want two stats lines with %q in:\n%s", c.mode, err, c.want, out.String())
			}
		})
	}
}

// TestDemoSwitch: `xdpfwd demo --mode switch` proves TCP between each pair
// of three hosts and cleans up.
func TestDemoSwitch(t *testing.T) {
	topo.RequireRoot(t)
	cmd := exec.Command(binary(t), "demo", "--mode", "switch", "--tcp-mib", "4")
	out, err := cmd.CombinedOutput()
	s := string(out)
	if err != nil || strings.Count(s, "byte-exact") != 6 || !strings.Contains(s, "removed 3 namespaces") {
		t.Errorf("demo --mode switch: %v\n%s", err, s)
	}
}
