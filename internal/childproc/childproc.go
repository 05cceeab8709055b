// Package childproc starts and stops the child processes a tool runs beside
// itself (`xdpfwd bench`'s sink and DUT, perf's forwarders): a process
// started in a network namespace or on pinned CPUs if asked, its output in
// a file or in memory; whether it has exited; a stop by its PID, SIGINT
// and then, after a timeout, SIGKILL; the tail of its output for an error
// message.
//
// A Process signals only the process it started, and only until it has
// reaped it, so a stop never reaches a process it did not start, even one
// that has since reused the PID. A child gets SIGTERM if its parent dies
// first (Pdeathsig): it does not outlive a killed tool.
package childproc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options say where a child runs and where its output goes.
type Options struct {
	// Netns is a named network namespace to run it in, through
	// `ip netns exec`, which execs it in place; "": this one.
	Netns string
	// CPUs pins it: it starts from a thread of this affinity, which it
	// and every thread it creates inherit; nil: no pin.
	CPUs []int
	// Log is a file, created afresh, for its stdout and stderr; "": they
	// are kept in memory.
	Log string
	// OwnGroup puts it in a process group of its own: a Ctrl-C at the
	// terminal reaches the tool, which stops it in order, and not the
	// child behind the tool's back.
	OwnGroup bool
	// Env is its environment; nil: the tool's own.
	Env []string
}

// Process is a process Start started.
type Process struct {
	name string
	cmd  *exec.Cmd
	log  string // Options.Log; "": out
	out  buffer
	done chan struct{}
	err  error // Wait's, once done is closed
}

// Start starts argv as the child name (for error messages). It returns
// once the process runs; Stop must follow, whatever happens next.
func Start(name string, argv []string, o Options) (*Process, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("start %s: no command", name)
	}
	if o.Netns != "" {
		argv = append([]string{"ip", "netns", "exec", o.Netns}, argv...)
	}
	c := &Process{name: name, log: o.Log, cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	c.cmd.Env = o.Env
	var logf *os.File
	if o.Log != "" {
		var err error
		if logf, err = os.Create(o.Log); err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		c.cmd.Stdout, c.cmd.Stderr = logf, logf
	} else {
		// The same writer: one pipe, written in order.
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		// A grandchild that keeps the pipe open does not hold Wait.
		c.cmd.WaitDelay = time.Second
	}
	// Pdeathsig fires when the thread that started the child exits: the
	// thread below is locked and waits for the child, so it exits only
	// after the child, or with the whole tool.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: o.OwnGroup}
	started := make(chan error, 1)
	go func() {
		defer close(c.done)
		if logf != nil {
			defer logf.Close()
		}
		// Never unlocked: the runtime discards the thread when this
		// goroutine ends, so no other goroutine runs with its affinity,
		// and while it waits the runtime starts no threads from it.
		runtime.LockOSThread()
		if o.CPUs != nil {
			var s unix.CPUSet
			for _, cpu := range o.CPUs {
				s.Set(cpu)
			}
			if err := unix.SchedSetaffinity(0, &s); err != nil {
				started <- fmt.Errorf("sched_setaffinity %v: %w", o.CPUs, err)
				return
			}
		}
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = c.cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-c.done
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return c, nil
}

// Name is the name the child was started as.
func (c *Process) Name() string { return c.name }

// Pid is the child's process ID.
func (c *Process) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (c *Process) Done() <-chan struct{} { return c.done }

// Exited reports whether the child has exited.
func (c *Process) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stop sends the child SIGINT unless it has exited, waits up to timeout
// for it to exit, then kills it. It returns an error, with the tail of
// the child's output, unless the child exited with status 0.
func (c *Process) Stop(timeout time.Duration) error {
	if !c.Exited() {
		// Through os.Process, which signals nothing once the child
		// is reaped: never a process that reused its PID.
		c.cmd.Process.Signal(syscall.SIGINT)
	}
	select {
	case <-c.done:
	case <-time.After(timeout):
		c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %s of SIGINT; killed%s", c.name, timeout, c.LogTail())
	}
	if c.err != nil {
		return fmt.Errorf("%s: %w%s", c.name, c.err, c.LogTail())
	}
	return nil
}

// WaitFor waits up to within for the child's output to hold s (a line
// saying it is ready). It fails if the child exits first.
func (c *Process) WaitFor(s string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		// Exited before the look: the output is then complete.
		exited := c.Exited()
		if strings.Contains(c.Output(), s) {
			return nil
		}
		if exited {
			return fmt.Errorf("%s exited before it wrote %q (%v)%s", c.name, s, c.err, c.LogTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q within %v%s", c.name, s, within, c.LogTail())
		}
		select {
		case <-c.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Output is what the child has written so far.
func (c *Process) Output() string {
	if c.log == "" {
		return c.out.String()
	}
	b, _ := os.ReadFile(c.log) // a log gone says nothing more
	return string(b)
}

// LogTail is the last lines of the child's output as a clause for an
// error message ("; its output ends: a | b"), or "" when it wrote
// nothing.
func (c *Process) LogTail() string {
	out := strings.TrimSpace(c.Output())
	if out == "" {
		return ""
	}
	lines := strings.Split(out, "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "; its output ends: " + strings.Join(lines, " | ")
}

// buffer is a bytes.Buffer that the child's pipe writes while Output reads.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
