package control

import (
	"bufio"
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

// MaxRequest is the longest first line ReadOp reads: a capture request
// carries a compiled filter, up to 4 MiB as capture.Serve takes.
const MaxRequest = 4 << 20

// ReadOp reads conn's first line and returns its "op" field ("" when it
// has none, or is not JSON: the capture server then answers what is wrong
// with it) and a connection that reads that line again before the rest,
// for the server of that op. It reads within timeout.
func ReadOp(conn net.Conn, timeout time.Duration) (string, net.Conn, error) {
	conn.SetReadDeadline(time.Now().Add(timeout))
	defer conn.SetReadDeadline(time.Time{})
	br := bufio.NewReaderSize(conn, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) && len(line) <= MaxRequest {
			continue
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			err = fmt.Errorf("request longer than %d bytes", MaxRequest)
		} else if errors.Is(err, io.EOF) && len(line) > 0 {
			break // the last line, without its newline
		}
		return "", nil, fmt.Errorf("read the request: %w", err)
	}
	var head struct {
		Op string `json:"op"`
	}
	json.Unmarshal(line, &head) // not JSON: the capture server says so
	return head.Op, &replayConn{Conn: conn, r: io.MultiReader(bytes.NewReader(line), br)}, nil
}

// replayConn is a connection whose first bytes were read already.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(b []byte) (int, error) { return c.r.Read(b) }
