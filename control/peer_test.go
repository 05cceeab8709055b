package control_test

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// nobody is the user the tests connect as: not root, not the daemon's.
const nobody = 65534

// TestConnectorHelper is not a test: run by connector as another user, it
// connects to every socket it can find under $CONTROL_TEST_DIR until
// $CONTROL_TEST_DIR/stop exists, then prints "served PATH N times" for
// each that answered its line, and how many connections it tried.
func TestConnectorHelper(t *testing.T) {
	dir := os.Getenv("CONTROL_TEST_DIR")
	if dir == "" {
		t.Skip("a helper process, run by TestOtherUsers")
	}
	attempts, served := 0, map[string]int{}
	for {
		if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
			for p, n := range served {
				fmt.Printf("served %s %d times\n", p, n)
			}
			fmt.Printf("attempts %d\n", attempts)
			return
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSocket == 0 {
				return nil
			}
			attempts++
			c, err := net.Dial("unix", p)
			if err != nil {
				return nil
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Second))
			c.Write([]byte("hi\n"))
			if l, _ := bufio.NewReader(c).ReadString('\n'); l == "hi\n" {
				served[p]++
			}
			return nil
		})
	}
}

// connector starts TestConnectorHelper as user nobody on dir (which it
// makes reachable to that user) and returns a function that stops it and
// returns what it printed.
func connector(t *testing.T, dir string) func() string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestConnectorHelper$")
	cmd.Env = append(os.Environ(), "CONTROL_TEST_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() string {
		if stopped {
			return ""
		}
		stopped = true
		os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
		b, _ := io.ReadAll(out)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("the connector did not stop")
		}
		return string(b)
	}
	t.Cleanup(func() { stop() })
	return stop
}

// sharedDir is a directory every user may enter and read, as /run/xdpfwd
// is (mode 0755).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "xdpfwd-control-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOtherUsers: no other user than root or the daemon's is ever served:
// not while Listen makes the socket (even with umask 0, a window between
// bind and chmod), and not on a socket whose mode was loosened later
// (SO_PEERCRED).
func TestOtherUsers(t *testing.T) {
	topo.RequireRoot(t)
	t.Run("while made", func(t *testing.T) {
		old := syscall.Umask(0)
		defer syscall.Umask(old)
		dir := sharedDir(t)
		stop := connector(t, dir)
		path := filepath.Join(dir, "run", "x.sock")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		rounds := 0
		for start := time.Now(); time.Since(start) < 3*time.Second; rounds++ {
			s, err := control.Listen(path)
			if err != nil {
				t.Fatal(err)
			}
			go s.Serve(echo)
			s.Close(time.Second)
		}
		out := stop()
		t.Logf("%d rounds of Listen and Close in 3 s; connector: %s", rounds, strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
		if strings.Contains(out, "served") {
			t.Errorf("another user was served while the socket was made:\n%s", out)
		}
		if !strings.Contains(out, "attempts ") {
			t.Errorf("the connector did not run: %q", out)
		}
	})
	t.Run("mode loosened", func(t *testing.T) {
		dir := sharedDir(t)
		path := filepath.Join(dir, "x.sock")
		s, err := control.Listen(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(time.Second)
		go s.Serve(echo)
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
		// Root still is.
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("hi\n"))
		if l, _ := bufio.NewReader(c).ReadString('\n'); l != "hi\n" {
			t.Errorf("root was not served: %q", l)
		}
		c.Close()
		stop := connector(t, dir)
		deadline := time.Now().Add(10 * time.Second)
		for s.Refused() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		out := stop()
		t.Logf("refused %d; connector: %s", s.Refused(), strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
		if strings.Contains(out, "served") || s.Refused() == 0 {
			t.Errorf("user %d on a socket of mode 0666: refused %d times, connector said:\n%s", nobody, s.Refused(), out)
		}
	})
}
