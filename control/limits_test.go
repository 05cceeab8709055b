package control_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/cbpf"
	"github.com/xdpfwd/xdpfwd/control"
)

// padded is a JSON request line of n bytes, newline included.
func padded(op string, n int) string {
	head := `{"op":"` + op + `","pad":"`
	return head + strings.Repeat("a", n-len(head)-3) + "\"}\n"
}

// TestReadOp: the first line's op, the line and what follows it read
// again, and the bound on its length.
func TestReadOp(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		op       string
		err      error // nil: the connection reads in back whole
	}{
		{"link request", `{"op":"link.list"}` + "\n" + `{"op":"link.del","name":"x"}` + "\n", "link.list", nil},
		{"capture, last line without newline", `{"snaplen":64}`, "", nil},
		{"not JSON", "hello\nworld", "", nil},
		{"MaxRequest bytes", padded("capture", control.MaxRequest), "capture", nil},
		{"MaxRequest bytes and more after", padded("capture", control.MaxRequest) + "more", "capture", nil},
		{"a byte over MaxRequest", padded("capture", control.MaxRequest+1), "", control.ErrRequestTooLong},
		{"4 MiB", padded("capture", 4<<20), "", control.ErrRequestTooLong},
		{"nothing", "", "", io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			defer server.Close()
			go func() {
				client.Write([]byte(tc.in))
				client.Close()
			}()
			op, rc, err := control.ReadOp(server, 5*time.Second)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("ReadOp: %v; want %v", err, tc.err)
				}
				return
			}
			if err != nil || op != tc.op {
				t.Fatalf("ReadOp: op %q, %v; want %q", op, err, tc.op)
			}
			got, err := io.ReadAll(rc)
			if err != nil || string(got) != tc.in {
				t.Errorf("read again: %d bytes, %v; want the %d sent", len(got), err, len(tc.in))
			}
		})
	}
}

// TestReadOpAllocates: reading a short request allocates little (no
// buffer sized for the longest request, made before anything came).
func TestReadOpAllocates(t *testing.T) {
	req := []byte(`{"op":"link.list"}` + "\n")
	const runs = 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if _, _, err := control.ReadOp(&bytesConn{r: bytes.NewReader(req)}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("ReadOp of a %d-byte request: %d bytes allocated", len(req), per)
	if per > 4<<10 {
		t.Errorf("ReadOp of a %d-byte request allocates %d bytes: want at most 4 KiB", len(req), per)
	}
}

// bytesConn is a connection that reads r.
type bytesConn struct {
	net.Conn
	r io.Reader
}

func (c *bytesConn) Read(b []byte) (int, error)         { return c.r.Read(b) }
func (c *bytesConn) SetReadDeadline(time.Time) error    { return nil }
func (c *bytesConn) SetWriteDeadline(t time.Time) error { return nil }

// TestMaxRequest: the longest capture request a client can send (a
// filter of cbpf.MaxInstructions, each field at its largest, 64 links of
// 15 bytes, every number at its largest) fits in MaxRequest with a third
// of it to spare, as its comment says.
func TestMaxRequest(t *testing.T) {
	req := capture.Request{Direction: "drop", Snaplen: capture.DefaultSnaplen, Count: ^uint64(0), Buffer: capture.MaxBuffer}
	for range 64 {
		req.Links = append(req.Links, strings.Repeat("x", 15))
	}
	req.Filter = make([]cbpf.Instruction, cbpf.MaxInstructions)
	for i := range req.Filter {
		req.Filter[i] = cbpf.Instruction{Op: 0xffff, Jt: 0xff, Jf: 0xff, K: 0xffffffff}
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	n := len(b) + 1 // and its newline
	t.Logf("the longest capture request: %d bytes; MaxRequest %d", n, control.MaxRequest)
	if n*4/3 > control.MaxRequest {
		t.Errorf("the longest capture request is %d bytes: MaxRequest %d leaves less than a third of it to spare", n, control.MaxRequest)
	}
}

// limitServer serves path as the daemon does: ReadOp, an error line if it
// fails, else "ok" and the connection held until its client closes it.
func limitServer(t *testing.T, grace time.Duration) (*control.Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.sock")
	s, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	control.SetRequestGrace(s, grace)
	t.Cleanup(func() { s.Close(time.Second) })
	go s.Serve(func(c net.Conn) {
		defer c.Close()
		_, rc, err := control.ReadOp(c, 10*time.Second)
		if err != nil {
			control.RefuseRequest(c, err)
			return
		}
		rc.Write([]byte("ok\n"))
		io.Copy(io.Discard, rc)
	})
	return s, path
}

// client connects to path and sends line (without a newline: a partial
// request), closing the connection at the test's end. A write may fail:
// a refused connection can be closed before it (what it reads says why).
func client(t *testing.T, path, line string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte(line))
	return c, bufio.NewReader(c)
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	l, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read a line: %q, %v", l, err)
	}
	return l
}

// TestMaxConns: beyond MaxConns, a connection takes the place of the one
// that has waited longest for its request, past RequestGrace, and is
// refused in one line (counted) when there is none: never one whose
// request was read.
func TestMaxConns(t *testing.T) {
	t.Run("served keep their places", func(t *testing.T) {
		s, path := limitServer(t, 0) // any connection without a request may go
		for range control.MaxConns {
			_, r := client(t, path, "{}\n")
			if l := readLine(t, r); l != "ok\n" {
				t.Fatalf("within the limit: %q", l)
			}
		}
		_, r := client(t, path, "{}\n")
		if l := readLine(t, r); !strings.Contains(l, `"error":"control socket busy`) || !strings.Contains(l, `"ok":false`) || !strings.Contains(l, `"code":"busy"`) {
			t.Errorf("beyond %d served connections: %q; want a busy error", control.MaxConns, l)
		}
		if s.Busy() != 1 || s.Evicted() != 0 {
			t.Errorf("busy %d, evicted %d; want 1, 0", s.Busy(), s.Evicted())
		}
	})
	t.Run("waiting within the grace keep their places", func(t *testing.T) {
		s, path := limitServer(t, time.Hour)
		for range control.MaxConns {
			client(t, path, `{"op":`)
		}
		_, r := client(t, path, "{}\n")
		if l := readLine(t, r); !strings.Contains(l, "busy") {
			t.Errorf("beyond %d connections waiting for their request: %q; want a busy error", control.MaxConns, l)
		}
		if s.Busy() != 1 || s.Evicted() != 0 {
			t.Errorf("busy %d, evicted %d; want 1, 0", s.Busy(), s.Evicted())
		}
	})
	t.Run("waiting past the grace give theirs", func(t *testing.T) {
		s, path := limitServer(t, 0)
		var first *bufio.Reader
		for i := range control.MaxConns {
			_, r := client(t, path, `{"op":`)
			if i == 0 {
				first = r
			}
		}
		_, r := client(t, path, "{}\n")
		if l := readLine(t, r); l != "ok\n" {
			t.Errorf("beyond %d connections waiting for their request too long: %q; want served", control.MaxConns, l)
		}
		if l := readLine(t, first); !strings.Contains(l, "no request within") || !strings.Contains(l, `"code":"busy"`) {
			t.Errorf("the connection that waited longest: %q; want told why it is closed", l)
		}
		if s.Busy() != 0 || s.Evicted() != 1 {
			t.Errorf("busy %d, evicted %d; want 0, 1", s.Busy(), s.Evicted())
		}
	})
}

// TestRequestTooLong: a first line longer than MaxRequest is answered,
// as the request's fault, and the connection closed, while the client
// still writes it.
func TestRequestTooLong(t *testing.T) {
	_, path := limitServer(t, control.RequestGrace)
	c, r := client(t, path, "")
	go c.Write([]byte(padded("capture", 4<<20))) // ends when the server closes
	if l := readLine(t, r); !strings.Contains(l, "request longer than") || !strings.Contains(l, `"bad_request":true`) {
		t.Errorf("a request of 4 MiB: %q; want refused as longer than %d bytes", l, control.MaxRequest)
	}
}
