package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestPromiscReleasedOnKill9: xdpfwd holds its links promiscuous while it
// runs where its mode needs it (the default xconnect, reflect; not sink,
// not --promisc off, from the flag or the config file), says so in the
// ready line, and after kill -9 the links' promiscuity is back to 0: the
// kernel dropped the membership with the dead process's socket. Before
// the fix, the default run left it at 0, and a NIC dropped unicast
// frames for the other side's MACs.
func TestPromiscReleasedOnKill9(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "off.yaml")
	if err := os.WriteFile(conf, []byte("promisc: off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"default", nil, 1},
		{"off", []string{"--promisc", "off"}, 0},
		{"config off", []string{"--config", conf}, 0},
		{"reflect", []string{"--mode", "reflect"}, 1},
		{"sink", []string{"--mode", "sink"}, 0},
		{"sink on", []string{"--mode", "sink", "--promisc=on"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPair(t, topo.Options{})
			args := append([]string{"run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", "off"}, tc.args...)
			pr := startBin(t, args...)
			waitReady(t, pr, p, 1, 20*time.Second)
			line := fmt.Sprintf("promiscuous=%v", tc.want == 1)
			if !strings.Contains(pr.stderr.String(), line) {
				t.Errorf("ready line lacks %q:\n%s", line, pr.stderr.String())
			}
			for _, l := range []string{p.LinkA, p.LinkB} {
				if n := topo.Promiscuity(t, l); n != tc.want {
					t.Errorf("%s while xdpfwd %s runs: promiscuity %d, want %d", l, strings.Join(tc.args, " "), n, tc.want)
				}
			}
			if err := pr.cmd.Process.Kill(); err != nil {
				t.Fatalf("kill -9 %d: %v", pr.cmd.Process.Pid, err)
			}
			pr.wait(10 * time.Second)
			if ws, ok := pr.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("%v, want death by SIGKILL", pr.cmd.ProcessState)
			}
			// The kernel closes a dead process's files before its parent
			// can reap it; poll briefly all the same.
			deadline := time.Now().Add(2 * time.Second)
			for _, l := range []string{p.LinkA, p.LinkB} {
				n := topo.Promiscuity(t, l)
				for n != 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
					n = topo.Promiscuity(t, l)
				}
				if n != 0 {
					t.Errorf("%s after kill -9: promiscuity %d, want 0", l, n)
				}
			}
		})
	}
}
