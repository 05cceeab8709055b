package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeSystemd listens where $NOTIFY_SOCKET points, as systemd does, and
// returns each datagram it reads, closing the descriptors that come with
// it (a barrier's pipe) unless hold.
func fakeSystemd(t *testing.T, name string, hold bool) <-chan string {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(Socket, name)
	got := make(chan string, 16)
	var held []int
	go func() {
		for {
			b, oob := make([]byte, 4096), make([]byte, 256)
			n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
			if err != nil {
				close(got)
				return
			}
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					fds, _ := unix.ParseUnixRights(&m)
					if hold {
						held = append(held, fds...)
					} else {
						for _, fd := range fds {
							unix.Close(fd)
						}
					}
				}
			}
			got <- string(b[:n])
		}
	}()
	t.Cleanup(func() {
		c.Close()
		for _, fd := range held {
			unix.Close(fd)
		}
	})
	return got
}

func TestNotify(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@xdpfwd-sdnotify-test-" + strings.ReplaceAll(t.Name(), "/", "-")} {
		got := fakeSystemd(t, name, false)
		if ok, err := Notify("READY=1", "STATUS=forwarding"); !ok || err != nil {
			t.Fatalf("%s: Notify: %v %v", name, ok, err)
		}
		if m := <-got; m != "READY=1\nSTATUS=forwarding" {
			t.Errorf("%s: systemd read %q", name, m)
		}
		if err := Barrier(time.Second); err != nil {
			t.Fatalf("%s: Barrier: %v", name, err)
		}
		if m := <-got; m != "BARRIER=1" {
			t.Errorf("%s: systemd read %q, want the barrier", name, m)
		}
	}
}

// TestBarrierTimesOut: a systemd that does not close the pipe holds the
// caller no longer than the timeout.
func TestBarrierTimesOut(t *testing.T) {
	fakeSystemd(t, filepath.Join(t.TempDir(), "notify"), true)
	begin := time.Now()
	if err := Barrier(100 * time.Millisecond); err == nil {
		t.Error("Barrier with the pipe held open: no error")
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Barrier returned after %v", d)
	}
}

// TestWithoutSystemd: nothing is sent, nothing fails.
func TestWithoutSystemd(t *testing.T) {
	t.Setenv(Socket, "")
	os.Unsetenv(Socket)
	if ok, err := Notify("READY=1"); ok || err != nil {
		t.Errorf("Notify without $NOTIFY_SOCKET: %v %v", ok, err)
	}
	if err := Barrier(time.Second); err != nil {
		t.Errorf("Barrier without $NOTIFY_SOCKET: %v", err)
	}
	t.Setenv(Socket, "relative/path")
	if _, err := Notify("READY=1"); err == nil {
		t.Error("Notify to a relative path: no error")
	}
}
