package childproc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// sh is argv running script in sh.
func sh(script string) []string { return []string{"sh", "-c", script} }

// finish waits for a child that runs to its end, then reaps it with Stop,
// which then signals nothing.
func finish(t *testing.T, c *Process) error {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Errorf("%s still runs after 10 s", c.Name())
	}
	return c.Stop(time.Second)
}

// TestStop: a child that stops on SIGINT stops cleanly; one that exits
// with an error, or ignores SIGINT until killed, fails Stop with its name
// and the tail of its output; a second Stop signals nothing and says the
// same.
func TestStop(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		log    bool
		want   []string // in Stop's error; nil: no error
	}{
		{"clean", `trap 'exit 0' INT; echo ready; while :; do sleep 0.01; done`, false, nil},
		{"clean-log", `trap 'exit 0' INT; echo ready; while :; do sleep 0.01; done`, true, nil},
		{"status", `trap 'echo bye >&2; exit 3' INT; echo ready; while :; do sleep 0.01; done`, false, []string{"status: exit status 3; its output ends: ready | bye"}},
		{"status-log", `trap 'echo bye >&2; exit 3' INT; echo ready; while :; do sleep 0.01; done`, true, []string{"status-log: exit status 3; its output ends: ready | bye"}},
		// SIGINT ignored, and the ignoring inherited by what sh execs.
		{"killed", `trap '' INT; echo ready; exec sleep 30`, false, []string{"killed did not stop within 200ms of SIGINT; killed; its output ends: ready"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o Options
			if tc.log {
				o.Log = filepath.Join(t.TempDir(), "child.log")
			}
			c, err := Start(tc.name, sh(tc.script), o)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.WaitFor("ready", 10*time.Second); err != nil {
				c.Stop(time.Second)
				t.Fatal(err)
			}
			if c.Exited() {
				t.Fatal("exited before Stop")
			}
			err = c.Stop(200 * time.Millisecond)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Stop: %v", err)
			case tc.want != nil && (err == nil || !strings.Contains(err.Error(), tc.want[0])):
				t.Fatalf("Stop: %v, want %q", err, tc.want[0])
			}
			if !c.Exited() {
				t.Fatal("not exited after Stop")
			}
			// Reaped: a second Stop signals nothing and waits for
			// nothing; it fails as the child did.
			start := time.Now()
			if err2 := c.Stop(time.Minute); (err2 == nil) != (err == nil) || time.Since(start) > time.Second {
				t.Fatalf("second Stop after %v: %v (first: %v)", time.Since(start), err2, err)
			}
			if tc.log {
				b, err := os.ReadFile(o.Log)
				if err != nil || !strings.HasPrefix(string(b), "ready\n") || c.Output() != string(b) {
					t.Fatalf("log %q (%v), Output %q", b, err, c.Output())
				}
			}
		})
	}
}

// TestWaitFor: a child that exits before it writes what is awaited, or
// stays silent, fails the wait, which names it and what it awaited.
func TestWaitFor(t *testing.T) {
	c, err := Start("early", sh(`echo starting; exit 2`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = c.WaitFor("ready", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), `early exited before it wrote "ready" (exit status 2); its output ends: starting`) {
		t.Fatalf("WaitFor: %v", err)
	}
	if err := finish(t, c); err == nil || !strings.Contains(err.Error(), "exit status 2") {
		t.Fatalf("Stop after exit: %v", err)
	}

	c, err = Start("silent", []string{"sleep", "30"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(time.Second)
	start := time.Now()
	err = c.WaitFor("ready", 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `silent: no "ready" within 100ms`) || time.Since(start) > 5*time.Second {
		t.Fatalf("WaitFor after %v: %v", time.Since(start), err)
	}
}

// TestStartFails: a command that cannot start is an error naming the child.
func TestStartFails(t *testing.T) {
	_, err := Start("nothing", []string{"/nonexistent/xdpfwd-proc-test"}, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "start nothing: ") {
		t.Fatalf("err %v", err)
	}
	_, err = Start("no-dir", []string{"true"}, Options{Log: "/nonexistent/dir/child.log"})
	if err == nil || !strings.HasPrefix(err.Error(), "start no-dir: ") {
		t.Fatalf("err %v", err)
	}
}

// TestPin: a child started with CPUs runs on them, and the pin leaves the
// tool's own threads as they were.
func TestPin(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for i := range len(before) * 64 {
		if before.IsSet(i) {
			cpu = i
		}
	}
	c, err := Start("pinned", sh(`grep Cpus_allowed_list /proc/self/status`), Options{CPUs: []int{cpu}})
	if err != nil {
		t.Fatal(err)
	}
	if err := finish(t, c); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(c.Output()); len(f) != 2 || f[1] != strconv.Itoa(cpu) {
		t.Fatalf("child's %q, want CPU %d", c.Output(), cpu)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("this thread's affinity %v, was %v", after, before)
	}
}

// TestOwnGroup: OwnGroup puts the child in a process group of its own;
// without it, the child shares the tool's.
func TestOwnGroup(t *testing.T) {
	for _, own := range []bool{false, true} {
		c, err := Start("group", []string{"sleep", "30"}, Options{OwnGroup: own})
		if err != nil {
			t.Fatal(err)
		}
		pgid, err := unix.Getpgid(c.Pid())
		c.Stop(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := pgid == c.Pid(); got != own || !own && pgid != syscall.Getpgrp() {
			t.Fatalf("OwnGroup %v: pgid %d, pid %d, ours %d", own, pgid, c.Pid(), syscall.Getpgrp())
		}
	}
}

// TestNetns: a child started in a namespace runs there.
func TestNetns(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	ours, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start("in-ns", []string{"readlink", "/proc/self/ns/net"}, Options{Netns: p.A.Name})
	if err != nil {
		t.Fatal(err)
	}
	if err := finish(t, c); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(c.Output()); !strings.HasPrefix(got, "net:[") || got == ours {
		t.Fatalf("child's namespace %q, ours %q", got, ours)
	}
}
