package control_test

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control"
)

func echo(c net.Conn) {
	defer c.Close()
	l, _ := bufio.NewReader(c).ReadString('\n')
	c.Write([]byte(l))
}

// TestListen: the socket is mode 0600 in a directory Listen made, answers,
// and is gone after Close.
func TestListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.sock")
	s, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(echo)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v; want a socket of mode 0600", path, err, fi.Mode())
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("hi\n"))
	if l, _ := bufio.NewReader(c).ReadString('\n'); l != "hi\n" {
		t.Errorf("echo: %q", l)
	}
	c.Close()
	if _, err := control.Listen(path); err == nil || !strings.Contains(err.Error(), control.ErrInUse.Error()) {
		t.Errorf("a second Listen on a live socket: %v, want ErrInUse", err)
	}
	s.Close(time.Second)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket still there after Close: %v", err)
	}
}

// TestStale: a socket nobody answers on (a daemon that was killed) is
// replaced; a file that is not a socket is left alone.
func TestStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody listens
	s, err := control.Listen(path)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	s.Close(time.Second)

	file := filepath.Join(dir, "f.sock")
	os.WriteFile(file, []byte("keep"), 0o644)
	if _, err := control.Listen(file); err == nil {
		t.Error("a regular file was replaced by a socket")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("the regular file was changed")
	}
}

// TestCloseCutsIdleClients: Close waits for handlers, up to its grace
// period, then closes their connections.
func TestCloseCutsIdleClients(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sock")
	s, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	accepted, ended := make(chan struct{}), make(chan struct{})
	go s.Serve(func(c net.Conn) {
		close(accepted)
		c.Read(make([]byte, 1)) // blocks until Close cuts it
		close(ended)
	})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-accepted
	start := time.Now()
	s.Close(200 * time.Millisecond)
	select {
	case <-ended:
	default:
		t.Error("Close returned with a handler still running")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
}
