package linkop_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestRequestLines: the requests after a connection's first are bounded
// line by line (a line too long is answered and the connection closed,
// not held whole in memory), not by what the connection carried over its
// life (a client that asks again and again is answered every time).
func TestRequestLines(t *testing.T) {
	list := []byte(`{"op":"link.list"}` + "\n")
	tests := []struct {
		name  string
		lines [][]byte
		// want: how many replies are OK; then, if last, the last reply's
		// error.
		ok   int
		last string
	}{
		{"a line of 64 KiB", [][]byte{list, append([]byte(`{"op":"link.list","pad":"`+strings.Repeat("a", 64<<10)), `"}`+"\n"...)}, 1, "longer than"},
		{"60000 requests, 1.1 MB", [][]byte{bytes.Repeat(list, 60000)}, 60000, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("unix", serve(t, &fakeManager{links: []string{"up0"}}))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			go func() {
				for _, l := range tt.lines {
					if _, err := conn.Write(l); err != nil {
						return
					}
				}
			}()
			r := bufio.NewReader(conn)
			ok, last := 0, ""
			for {
				line, err := r.ReadBytes('\n')
				if err != nil {
					break
				}
				var rep linkop.Reply
				if err := json.Unmarshal(line, &rep); err != nil {
					t.Fatalf("reply %q: %v", line, err)
				}
				if !rep.OK {
					last = rep.Error
					if !rep.BadRequest {
						t.Errorf("%q: not marked as the request's fault", rep.Error)
					}
					break
				}
				if ok++; ok == tt.ok && tt.last == "" {
					break
				}
			}
			if ok != tt.ok || !strings.Contains(last, tt.last) || (tt.last == "") != (last == "") {
				t.Errorf("%d replies OK, then %q; want %d, then %q", ok, last, tt.ok, tt.last)
			}
		})
	}
}
