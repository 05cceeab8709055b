package capture

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDialRefused: a daemon that answers a connection with an error line
// and closes it (busy, control.MaxConns) while the request is still being
// written: Dial returns the daemon's error, not the write's broken pipe.
func TestDialRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const msg = "control socket busy: 32 connections open, the most it serves at once; try again"
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte(`{"ok":false,"error":"` + msg + `","code":"busy"}` + "\n"))
		c.Close() // unread: the request is longer than the socket holds
	}()
	// A request longer than a unix socket's buffers: the write is under
	// way when the daemon closes.
	req := Request{}
	for range 64 << 10 {
		req.Links = append(req.Links, "link-0123456789")
	}
	done := make(chan error, 1)
	go func() {
		c, err := Dial(path, req)
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Dial did not return within 10 s of the daemon's close")
	}
	if err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("Dial: %v; want the daemon's error %q", err, msg)
	}
}
