package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSystemd listens where $NOTIFY_SOCKET points, as systemd does, and
// returns each datagram it reads.
func fakeSystemd(t *testing.T, name string) <-chan string {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(Socket, name)
	got := make(chan string, 16)
	go func() {
		defer close(got)
		for {
			b := make([]byte, 4096)
			n, err := c.Read(b)
			if err != nil {
				return
			}
			got <- string(b[:n])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return got
}

// TestNotify: the assignments arrive as one datagram, at a path and at an
// abstract name.
func TestNotify(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@xdpfwd-sdnotify-test-" + strings.ReplaceAll(t.Name(), "/", "-")} {
		got := fakeSystemd(t, name)
		if ok, err := Notify("READY=1", "STATUS=forwarding"); !ok || err != nil {
			t.Fatalf("%s: Notify: %v %v", name, ok, err)
		}
		if m := <-got; m != "READY=1\nSTATUS=forwarding" {
			t.Errorf("%s: systemd read %q", name, m)
		}
	}
}

// TestWithoutSystemd: nothing is sent, nothing fails; a name that is
// neither a path nor abstract is an error.
func TestWithoutSystemd(t *testing.T) {
	t.Setenv(Socket, "")
	os.Unsetenv(Socket)
	if ok, err := Notify("READY=1"); ok || err != nil {
		t.Errorf("Notify without $NOTIFY_SOCKET: %v %v", ok, err)
	}
	t.Setenv(Socket, "relative/path")
	if _, err := Notify("READY=1"); err == nil {
		t.Error("Notify to a relative path: no error")
	}
}
