package linkop_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// fakeManager keeps a set of names.
type fakeManager struct {
	mu    sync.Mutex
	links []string
}

func (m *fakeManager) List() (linkop.List, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := linkop.List{Mode: "switch"}
	for i, n := range m.links {
		l.Links = append(l.Links, linkop.Link{Name: n, RXPackets: uint64(i)})
	}
	return l, nil
}

func (m *fakeManager) Add(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.links {
		if n == name {
			return fmt.Errorf("link %s: %w", name, linkop.ErrExists)
		}
	}
	if name == "nope" {
		return fmt.Errorf("link %s: %w", name, linkop.ErrUnsupported)
	}
	if name == "absent" {
		return fmt.Errorf("link %s: %w", name, linkop.ErrNoSuchLink)
	}
	if name == "full" {
		return linkop.Refused(linkop.Mark(fmt.Errorf("link %s: all taken (--max-links)", name), linkop.ErrFull))
	}
	if name == "jumbo" {
		return linkop.Mark(fmt.Errorf("link %s: MTU 9000 does not fit", name), linkop.ErrMTU)
	}
	if name == "refused" {
		return linkop.Refused(fmt.Errorf("link %s: not with this daemon", name))
	}
	if name == "failed" {
		return fmt.Errorf("link %s: the kernel said no", name)
	}
	m.links = append(m.links, name)
	return nil
}

func (m *fakeManager) Del(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, n := range m.links {
		if n == name {
			m.links = append(m.links[:i], m.links[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("link %s: %w", name, linkop.ErrUnknownLink)
}

// serve runs a control socket that dispatches as the daemon does: link
// ops to linkop.Serve, anything else to a stand-in capture server that
// echoes the line it got.
func serve(t *testing.T, m linkop.Manager) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.sock")
	s, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(time.Second) })
	go s.Serve(func(c net.Conn) {
		op, rc, err := control.ReadOp(c, time.Second)
		if err != nil {
			c.Close()
			return
		}
		if linkop.IsOp(op) {
			linkop.Serve(rc, m)
			return
		}
		defer rc.Close()
		var v map[string]any
		if err := json.NewDecoder(rc).Decode(&v); err != nil {
			v = map[string]any{"error": err.Error()}
		}
		v["capture"] = true
		b, _ := json.Marshal(v)
		rc.Write(append(b, '\n'))
	})
	return path
}

// TestOps: add, list, del over one connection, with each refusal's
// error matched by errors.Is / errors.As: a Manager's Refused error, or
// one Marked ErrFull or ErrMTU, is a RequestError (the CLI's exit 2),
// and its message is the Manager's; a plain failure is not.
func TestOps(t *testing.T) {
	c, err := linkop.Dial(serve(t, &fakeManager{links: []string{"up0"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AddLink("veth1"); err != nil {
		t.Fatalf("add veth1: %v", err)
	}
	var re *linkop.RequestError
	tests := []struct {
		name    string
		err     error
		is      error
		request bool
	}{
		{"add twice", c.AddLink("veth1"), linkop.ErrExists, true},
		{"del unknown", c.DelLink("veth9"), linkop.ErrUnknownLink, true},
		{"add absent", c.AddLink("absent"), linkop.ErrNoSuchLink, true},
		{"add unsupported", c.AddLink("nope"), linkop.ErrUnsupported, false},
		{"add full", c.AddLink("full"), linkop.ErrFull, true},
		{"add MTU", c.AddLink("jumbo"), linkop.ErrMTU, true},
		{"add refused", c.AddLink("refused"), nil, true},
		{"add failed", c.AddLink("failed"), nil, false},
		{"add bad name", c.AddLink("a/b"), nil, true},
		{"add too long", c.AddLink("0123456789abcdef"), nil, true},
	}
	for _, tt := range tests {
		if tt.err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if tt.is != nil && !errors.Is(tt.err, tt.is) {
			t.Errorf("%s: %v, want errors.Is %v", tt.name, tt.err, tt.is)
		}
		if got := errors.As(tt.err, &re); got != tt.request {
			t.Errorf("%s: %v: RequestError %v, want %v", tt.name, tt.err, got, tt.request)
		}
	}
	l, err := c.ListLinks()
	if err != nil || l.Mode != "switch" || len(l.Links) != 2 || !l.Has("up0") || !l.Has("veth1") {
		t.Fatalf("list: %+v, %v; want switch with up0 and veth1", l, err)
	}
	if err := c.DelLink("veth1"); err != nil {
		t.Fatalf("del veth1: %v", err)
	}
	if l, _ := c.ListLinks(); l.Has("veth1") {
		t.Errorf("veth1 listed after del: %+v", l)
	}
}

// TestCaptureStillDispatched: a request without "op" (what capture
// clients send) reaches the capture server whole, its bytes replayed.
func TestCaptureStillDispatched(t *testing.T) {
	path := serve(t, &fakeManager{})
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte(`{"links":["a"],"direction":"rx","snaplen":96}` + "\n"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil || v["capture"] != true || v["direction"] != "rx" || v["snaplen"] != 96.0 {
		t.Fatalf("capture server got %s (%v); want the request whole", b, err)
	}
}

// TestOldDaemon: a daemon that takes a link request for a capture (it
// answers a Hello, no "ok") reads as ErrUnsupported, not as success.
func TestOldDaemon(t *testing.T) {
	path := oldDaemon(t, `{"links":["a","b"],"reasons":[],"snaplen":262144,"workers":1}`, false)
	c, err := linkop.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AddLink("veth1"); !errors.Is(err, linkop.ErrUnsupported) {
		t.Fatalf("add against a capture-only daemon: %v, want ErrUnsupported", err)
	}
}

// oldDaemon serves one connection on a socket as a daemon older than the
// client: it answers with the line reply, at once or, with readFirst,
// after the request's line, and then reads until the client closes. It
// returns the socket's path.
func oldDaemon(t *testing.T, reply string, readFirst bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if readFirst {
			bufio.NewReader(c).ReadBytes('\n')
		}
		c.Write([]byte(reply + "\n"))
		io.Copy(io.Discard, c)
	}()
	return path
}
