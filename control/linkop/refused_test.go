package linkop_test

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// TestRefusedBeforeRequest: a daemon that answers a connection with an
// error line and closes it (busy, control.MaxConns) before the client
// wrote its request: the client returns the daemon's error, not the
// write's broken pipe.
func TestRefusedBeforeRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const msg = "control socket busy: 32 connections open, the most it serves at once; try again"
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte(`{"ok":false,"error":"` + msg + `","code":"busy"}` + "\n"))
		c.Close()
	}()
	c, err := linkop.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-closed
	_, err = c.ListLinks()
	if err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("ListLinks: %v; want the daemon's error %q", err, msg)
	}
}
