// Handovers the daemon starts itself: SIGUSR2, and a SIGHUP that finds
// the installed binary replaced or config changes a reload cannot apply,
// start a fresh xdpfwd (the binary at the path this one was started
// from, with its arguments) that takes the datapath over through this
// daemon's control socket (takeover.go). Under systemd the successor
// becomes the unit's main process through the PID file (pidFile) when
// this one exits.

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/xdpfwd/xdpfwd/internal/sdnotify"
)

// successor starts the daemon's successors. Only the daemon's signal
// loop calls start; running is cleared by the successor's reaper.
type successor struct {
	// exe is the path this daemon was started from, as it was resolved
	// then: what an upgrade replaces. args are `run`'s.
	exe  string
	args []string
	// running: a successor is starting, not yet exited or in charge.
	running atomic.Bool
}

// newSuccessor records how this daemon was started: argv[0] made
// absolute against the directory it started in, or found on $PATH.
func newSuccessor(args []string) *successor {
	s := &successor{args: args}
	arg0 := os.Args[0]
	switch {
	case strings.Contains(arg0, "/"):
		s.exe, _ = filepath.Abs(arg0)
	default:
		if p, err := exec.LookPath(arg0); err == nil {
			s.exe, _ = filepath.Abs(p)
		}
	}
	if s.exe == "" {
		s.exe, _ = os.Executable()
	}
	return s
}

// replaced reports whether the file at exe is no longer the binary this
// process runs (a package upgrade renamed a new one over it).
func (s *successor) replaced() bool {
	var now, self syscall.Stat_t
	if syscall.Stat(s.exe, &now) != nil || syscall.Stat("/proc/self/exe", &self) != nil {
		return false
	}
	return now.Dev != self.Dev || now.Ino != self.Ino
}

// successorArgs are `run`'s args for a successor taking over from the
// daemon serving control socket ctl: args, less any --takeover, plus
// --takeover ctl.
func successorArgs(args []string, ctl string) []string {
	out := []string{"run"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "takeover" {
			if !hasValue {
				i++ // its value
			}
			continue
		}
		out = append(out, a)
	}
	return append(out, "--takeover", ctl)
}

// Why the daemon cannot start a successor.
var (
	errNoControl  = errors.New("no control socket (--control off, or it could not be made) to hand over on")
	errPID1       = errors.New("this xdpfwd is its container's first process: its exit would end the successor with it; update the pod instead (a new pod with --takeover auto takes over)")
	errStarting   = errors.New("a successor is starting already")
	errHandingOff = errors.New("this daemon handed its datapath over already")
)

// start starts a successor that takes over from the daemon serving ctl,
// for why (logged); it returns once the successor runs, not once it took
// over: the handover goes on on the control socket, and a successor that
// fails is logged with its exit status (its own log says why) while this
// daemon goes on.
func (s *successor) start(ctl, why string, handedOver *atomic.Bool, logger *slog.Logger) error {
	switch {
	case handedOver.Load():
		return errHandingOff
	case ctl == "":
		return errNoControl
	case os.Getpid() == 1:
		return errPID1
	case !s.running.CompareAndSwap(false, true):
		return errStarting
	}
	cmd := exec.Command(s.exe, successorArgs(s.args, ctl)...)
	// Its logs go where this one's go (the journal, a terminal); its
	// environment is this one's ($NOTIFY_SOCKET, the unit's).
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		s.running.Store(false)
		return fmt.Errorf("start %s: %w", s.exe, err)
	}
	logger.Info("starting a successor to hand the datapath to", "why", why, "pid", cmd.Process.Pid, "binary", s.exe)
	go func() {
		err := cmd.Wait()
		s.running.Store(false)
		if !handedOver.Load() {
			logger.Error("the successor exited without taking over; going on", "pid", cmd.Process.Pid, "status", err)
		}
	}()
	return nil
}

// pidFile is --pid-file: the daemon's PID, for a supervisor that follows
// it (systemd's PIDFile=). Its owner (the daemon serving the datapath)
// writes it once it forwards; at a handover the predecessor writes its
// successor's before it exits, which is when systemd reads it again ("a
// service may move to a new PID as long as it updates the PID file before
// the old one exits"): the successor, by then systemd's child, becomes
// the main process. MAINPID= would not do: sent while the predecessor
// lives, it makes a process systemd did not fork the main one, which a
// stop then SIGKILLs at once (systemd 252, measured: deploy/README.md).
type pidFile string

// write puts pid in the file, whole or not at all.
func (p pidFile) write(pid int) error {
	if p == "" {
		return nil
	}
	tmp := string(p) + ".new"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("--pid-file: %w", err)
	}
	if err := os.Rename(tmp, string(p)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("--pid-file: %w", err)
	}
	return nil
}

// remove removes the file if it still names pid.
func (p pidFile) remove(pid int) {
	if p == "" {
		return
	}
	if b, err := os.ReadFile(string(p)); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
		os.Remove(string(p))
	}
}

// handOverPID names pid, the successor that took the datapath over, in
// the PID file and to systemd's status line, before this process exits.
func (p pidFile) handOverPID(pid int, logger *slog.Logger) {
	if pid <= 0 {
		if p != "" {
			logger.Warn("--pid-file: the successor's PID is not known here (another PID namespace); the file is left as it was")
		}
		return
	}
	if err := p.write(pid); err != nil {
		logger.Error("the successor's PID not written: a supervisor may take this process's exit for the service's", "pid", pid, "err", err)
	}
	sdnotify.Notify(fmt.Sprintf("STATUS=handed over to pid %d", pid))
}
