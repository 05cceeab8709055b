package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Every client of the socket starts with one JSON line, its request. A
// request's "op" field names the protocol the rest of the connection
// speaks; a capture request (what `xdpfwd capture` has always sent) has
// none, so ReadOp gives "" for it and today's capture clients keep
// working against a daemon that speaks more.

// MaxRequest is the longest first line ReadOp reads, newline included.
// The longest request is a capture's, for its filter: each cBPF
// instruction is a JSON object of at most 46 bytes,
// {"op":65535,"jt":255,"jf":255,"k":4294967295} and a comma, and a
// client sends at most cbpf.MaxInstructions (4096, the kernel's
// BPF_MAXINSNS) of them, 184 KiB (the daemon takes capture.MaxFilter,
// 256, and answers a longer one with a message naming that limit, which
// it must read to give). The rest, 64 link names of up to 15 bytes quoted
// and the numbers, is under 2 KiB: 185 KiB in all. A link request is
// under 64 bytes. 256 KiB leaves over a third of that to spare
// (TestMaxRequest builds the longest capture request and checks).
const MaxRequest = 256 << 10

// ErrRequestTooLong: a first line longer than MaxRequest.
var ErrRequestTooLong = fmt.Errorf("request longer than %d bytes", MaxRequest)

// ReadOp reads conn's first line and returns its "op" field ("" when it
// has none, or is not JSON: the capture server then answers what is wrong
// with it) and a connection that reads that line again before the rest,
// for the server of that op. It reads within timeout (from the call, not
// from the last byte: a client that trickles its line does not extend
// it), at most MaxRequest bytes, into a buffer that grows only as the
// line arrives and that the connection drops once the line is read
// again. A connection from Server.Serve then keeps its place (RequestGrace).
func ReadOp(conn net.Conn, timeout time.Duration) (string, net.Conn, error) {
	conn.SetReadDeadline(time.Now().Add(timeout))
	defer conn.SetReadDeadline(time.Time{})
	buf := make([]byte, 0, 512)
	end := -1
	for end < 0 {
		if len(buf) == cap(buf) {
			if len(buf) >= MaxRequest {
				return "", nil, fmt.Errorf("read the request: %w", ErrRequestTooLong)
			}
			grown := make([]byte, len(buf), min(2*cap(buf), MaxRequest))
			copy(grown, buf)
			buf = grown
		}
		n, err := conn.Read(buf[len(buf):cap(buf)])
		if i := bytes.IndexByte(buf[len(buf):len(buf)+n], '\n'); i >= 0 {
			end = len(buf) + i + 1
		}
		buf = buf[:len(buf)+n]
		if err != nil && end < 0 {
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				end = len(buf) // the last line, without its newline
				break
			}
			return "", nil, fmt.Errorf("read the request: %w", err)
		}
	}
	if m, ok := conn.(interface{ requestRead() }); ok {
		m.requestRead()
	}
	var head struct {
		Op string `json:"op"`
	}
	json.Unmarshal(buf[:end], &head) // not JSON: the capture server says so
	// buf holds the line and what came after it in the same read.
	return head.Op, &replayConn{Conn: conn, pending: buf}, nil
}

// replayConn is a connection whose first bytes were read already.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.pending) == 0 {
		return c.Conn.Read(b)
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	if len(c.pending) == 0 {
		c.pending = nil // not held for the connection's life
	}
	return n, nil
}
