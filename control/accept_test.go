package control_test

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control"
)

func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestAcceptBacksOff: while accepting fails (EMFILE: the process is out
// of descriptors), the accept loop waits between tries instead of
// spinning, and serves the waiting client once descriptors are back.
func TestAcceptBacksOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sock")
	s, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(time.Second)
	c, err := net.Dial("unix", path) // waits in the backlog: not accepted yet
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Descriptors: the lowest free one becomes the limit, so that none
	// is left for accept.
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	lowest := f.Fd()
	f.Close()
	lim := syscall.Rlimit{Cur: uint64(lowest), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()

	go s.Serve(echo)
	const window = time.Second
	before := cpuTime(t)
	time.Sleep(window)
	used := cpuTime(t) - before
	restore()
	t.Logf("%v of CPU in %v while accept failed with EMFILE", used, window)
	if used > window/10 {
		t.Errorf("%v of CPU in %v while accept failed: want at most %v (a retry loop that backs off)", used, window, window/10)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("hi\n"))
	if l, err := bufio.NewReader(c).ReadString('\n'); l != "hi\n" {
		t.Errorf("the waiting client, once descriptors were back: %q, %v", l, err)
	}
}
