// The forwarder processes perf starts and stops, and the builds of their
// binaries.

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/childproc"
)

// child is a forwarder process perf started and must stop.
type child struct {
	p       *childproc.Process
	name    string
	logPath string
	// metricsAddr is where an xdpfwd started by startXdpfwd serves its
	// --metrics; "": nowhere.
	metricsAddr string
	// started is when it was started; ready how long it then took until
	// the first traffic crossed it (waitPath).
	started time.Time
	ready   time.Duration
}

// startChild starts bin with args pinned to cpus (the child and every
// thread it creates inherit the affinity), its output in logPath, in a
// process group of its own: a Ctrl-C at the terminal reaches perf, which
// stops the child in order, not the child behind perf's back.
func startChild(name, bin string, args []string, cpus []int, logPath string) (*child, error) {
	return startChildEnv(name, bin, args, nil, cpus, logPath)
}

// startChildEnv is startChild with env as the child's environment (nil:
// perf's own).
func startChildEnv(name, bin string, args, env []string, cpus []int, logPath string) (*child, error) {
	started := time.Now()
	p, err := childproc.Start(name, append([]string{bin}, args...), childproc.Options{CPUs: cpus, Log: logPath, OwnGroup: true, Env: env})
	if err != nil {
		return nil, err
	}
	return &child{p: p, name: name, logPath: logPath, started: started}, nil
}

// exited reports whether the child has exited.
func (c *child) exited() bool { return c.p.Exited() }

// waitExit waits up to timeout for the child to exit by itself, and
// reports whether it did.
func (c *child) waitExit(timeout time.Duration) bool {
	select {
	case <-c.p.Done():
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop sends SIGINT (by PID), waits up to timeout for a clean exit, then
// kills. It returns an error unless the child exited with status 0.
func (c *child) stop(timeout time.Duration) error { return c.p.Stop(timeout) }

// logTail returns the last lines of the child's output, for error messages.
func (c *child) logTail() string { return c.p.LogTail() }

// goBuild builds pkg (a package path or ".") in dir into out.
func goBuild(ctx context.Context, dir, pkg, out string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	// Each checkout builds with its own go.mod: perf/asavie is a module
	// outside the workspace, and a --src checkout may have none.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s in %s: %w: %s", pkg, dir, err, strings.TrimSpace(buf.String()))
	}
	return nil
}

// moduleRoot finds the main module's root directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: run perf from the xdpfwd module, or pass --src")
	}
	root := filepath.Dir(mod)
	// perf is a module of its own inside xdpfwd's: run from perf/, the
	// checkout to build is its parent.
	if _, err := os.Stat(filepath.Join(root, "..", "cmd", "xdpfwd")); err == nil && filepath.Base(root) == "perf" {
		root = filepath.Dir(root)
	}
	return root, nil
}
