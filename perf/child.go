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
	"syscall"
	"time"
)

// child is a forwarder process perf started and must stop.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
	metrics bool // serves --metrics on an address it logs (metricsAddr)
}

// startChild starts bin with args on a thread pinned to cpus, so the child
// and every thread it creates inherit that affinity. The pinned thread then
// waits for the child: it is the child's parent thread, and Pdeathsig
// (SIGTERM) fires when it dies, i.e. only if perf itself dies.
func startChild(name, bin string, args []string, cpus []int, logPath string) (*child, error) {
	return startChildEnv(name, bin, args, nil, cpus, logPath)
}

// startChildEnv is startChild with env as the child's environment (nil:
// perf's own).
func startChildEnv(name, bin string, args, env []string, cpus []int, logPath string) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &child{name: name, logPath: logPath, done: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C at the terminal reaches perf, which
	// stops the child in order, not the child behind perf's back.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	started := make(chan error, 1)
	go func() {
		defer close(c.done)
		defer logf.Close()
		err := onPinnedThread(cpus, func() error {
			if err := c.cmd.Start(); err != nil {
				started <- err
				return err
			}
			started <- nil
			c.waitErr = c.cmd.Wait()
			return nil
		})
		if err != nil {
			select {
			case started <- err:
			default:
			}
		}
	}()
	if err := <-started; err != nil {
		<-c.done
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return c, nil
}

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to timeout for the child to exit by itself, and
// reports whether it did.
func (c *child) waitExit(timeout time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop sends SIGINT (by PID), waits up to timeout for a clean exit, then
// kills. It returns an error unless the child exited with status 0.
func (c *child) stop(timeout time.Duration) error {
	if !c.exited() {
		c.cmd.Process.Signal(syscall.SIGINT)
	}
	select {
	case <-c.done:
	case <-time.After(timeout):
		c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %s of SIGINT; killed%s", c.name, timeout, c.logTail())
	}
	if c.waitErr != nil {
		return fmt.Errorf("%s: %w%s", c.name, c.waitErr, c.logTail())
	}
	return nil
}

// logTail returns the last lines of the child's output, for error messages.
func (c *child) logTail() string {
	b, err := os.ReadFile(c.logPath)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "; its output ends: " + strings.Join(lines, " | ")
}

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
