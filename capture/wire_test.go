package capture

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// serveUnix runs Serve for h on a unix socket of the test's and returns
// its path and Serve's results, one per connection.
func serveUnix(t *testing.T, h *Hub) (string, <-chan error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	served := make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { served <- Serve(c, h) }()
		}
	}()
	return path, served
}

// produce writes 64-byte packets to every point of h, non-stop, until
// the test ends.
func produce(t *testing.T, h *Hub) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	for w := range h.points {
		wg.Go(func() {
			data := make([]byte, 64)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if set := h.Point(w).Begin(); set != nil {
					for range 16 {
						set.Packet(0, w, RX, 0, [][]byte{data}, 64)
					}
					set.End()
				} else {
					time.Sleep(10 * time.Microsecond)
				}
			}
		})
	}
}

func openSessions(h *Hub) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// TestStopWhileStreaming: a client that asks to stop while the workers
// write non-stop gets what the rings held and the totals, promptly: the
// daemon looks at the stop between reads, not only once the rings are
// empty.
func TestStopWhileStreaming(t *testing.T) {
	const buffer = 64 << 10
	h := NewHub(2, []string{"a"})
	path, _ := serveUnix(t, h)
	produce(t, h)
	c, err := Dial(path, Request{Buffer: buffer})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i := range 10000 {
		if _, err := c.Next(); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.conn.SetReadDeadline(start.Add(3 * time.Second))
	after := 0
	for {
		_, err := c.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%d records in %v after Stop, still streaming: %v", after, time.Since(start), err)
		}
		after++
	}
	// At most what the rings held at the stop, and what was on its way:
	// the daemon's 256 KiB writer, the socket's buffers, the client's
	// 256 KiB reader (a record of 64 bytes is 88 in the stream).
	limit := (2*buffer + 2*256<<10 + 4<<20) / 88
	t.Logf("%d records in %v after Stop (limit %d), totals %+v", after, time.Since(start), limit, c.Totals())
	if after > limit {
		t.Errorf("%d records after Stop, want at most %d", after, limit)
	}
	if openSessions(h) != 0 {
		t.Errorf("%d sessions open after the stream ended", openSessions(h))
	}
}

// TestStalledClient: a client that stops reading does not hold its
// session (rings, filter) for ever: a write that makes no progress for
// writeTimeout ends the stream, and so does the forwarder stopping
// (Hub.Close), after closeGrace.
func TestStalledClient(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration // writeTimeout
		close   bool          // Hub.Close once the stream is stuck
	}{
		{"write timeout", 300 * time.Millisecond, false},
		{"hub close", time.Hour, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func(wt, cg time.Duration) { writeTimeout, closeGrace = wt, cg }(writeTimeout, closeGrace)
			writeTimeout, closeGrace = tc.timeout, 300*time.Millisecond
			h := NewHub(1, []string{"a"})
			path, served := serveUnix(t, h)
			produce(t, h)
			c, err := Dial(path, Request{Buffer: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Never read: the socket's buffers fill, the daemon's write
			// blocks, the rings fill: the workers count what they lose.
			if tc.close {
				h.mu.Lock()
				sess := h.sessions[0]
				h.mu.Unlock()
				for deadline := time.Now().Add(10 * time.Second); sess.Lost() == 0; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the rings of a client that does not read never filled")
					}
				}
				h.Close()
			}
			start := time.Now()
			select {
			case err := <-served:
				t.Logf("Serve returned after %v: %v", time.Since(start), err)
				if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("Serve: %v, want a deadline error", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Serve still writing to a client that does not read, %v on", time.Since(start))
			}
			if n := openSessions(h); n != 0 {
				t.Errorf("%d sessions still open", n)
			}
		})
	}
}
