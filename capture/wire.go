package capture

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/xdpfwd/xdpfwd/cbpf"
	"github.com/xdpfwd/xdpfwd/control"
)

// The stream between `xdpfwd capture` and the daemon, over the control
// socket: the client sends a Request (one JSON line); the daemon answers
// a Hello (one JSON line), then records (ring.go's layout), then a record
// length of 0 and the Totals (one JSON line). Before the first record of
// a link added since the Hello comes a record length of 1 and a NewLink
// (one JSON line): the link's number is the next after the Hello's and
// those announced before. The client ends the capture early by shutting
// its side down (SHUT_WR); the daemon then sends what the workers had
// written, and the Totals.

// Request asks for a capture.
type Request struct {
	Links     []string           `json:"links,omitempty"`
	Direction string             `json:"direction,omitempty"` // rx, tx, drop or all
	Snaplen   int                `json:"snaplen,omitempty"`
	Count     uint64             `json:"count,omitempty"`  // stop after so many packets (0: no limit)
	Buffer    int                `json:"buffer,omitempty"` // bytes per worker
	Filter    []cbpf.Instruction `json:"filter,omitempty"`
}

// Hello starts the daemon's answer.
type Hello struct {
	Links   []string `json:"links"`   // by number, as records name them
	Reasons []string `json:"reasons"` // drop reasons by code
	Snaplen int      `json:"snaplen"`
	Workers int      `json:"workers"`
	// Error refuses the request; BadRequest says it was the request's
	// fault (the client exits 2).
	Error      string `json:"error,omitempty"`
	BadRequest bool   `json:"bad_request,omitempty"`
}

// NewLink names a link added while the capture runs, numbered next.
type NewLink struct {
	Name string `json:"name"`
}

// linkMark, as a record's length, announces a NewLink.
const linkMark = 1

// Totals end the daemon's answer.
type Totals struct {
	Captured uint64 `json:"captured"` // records sent
	// Lost counts the packets the capture would have kept that did not
	// fit its buffers: forwarding did not wait for the capture.
	Lost uint64 `json:"lost"`
	// Error says why the capture ended by itself, if it did: the
	// forwarder stopped, or (LinkGone) a link it was asked for went.
	Error    string `json:"error,omitempty"`
	LinkGone string `json:"link_gone,omitempty"`
}

// An idle capture looks at its rings after pollMin, then ever less often
// up to pollMax: a capture whose filter keeps nothing costs the daemon 30
// wake-ups a second, not 500. A buffer of a few MiB per worker holds far
// more than pollMax of traffic.
const (
	pollMin = time.Millisecond
	pollMax = 32 * time.Millisecond
)

// A client that stops reading must not hold its session (its rings, its
// filter run on every packet): a write to it that makes no progress for
// writeTimeout ends the capture, and once the forwarder stops (Hub.Close)
// what is left must be taken within closeGrace. Variables for the tests.
var (
	writeTimeout = 30 * time.Second
	closeGrace   = 2 * time.Second
)

// streamConn bounds every write to the client by a deadline: writeTimeout
// from the write's start, no later than the cut-off set by cut.
type streamConn struct {
	net.Conn
	mu    sync.Mutex
	until time.Time // zero: no cut-off
}

func (c *streamConn) Write(b []byte) (int, error) {
	d := time.Now().Add(writeTimeout)
	c.mu.Lock()
	if !c.until.IsZero() && c.until.Before(d) {
		d = c.until
	}
	// Under mu, so that a cut between the choice and the call is not
	// overwritten by a later deadline.
	err := c.Conn.SetWriteDeadline(d)
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// cut makes every write from now on end by grace from now, the one
// blocked now included.
func (c *streamConn) cut(grace time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.until = time.Now().Add(grace)
	c.Conn.SetWriteDeadline(c.until)
}

// Serve runs the capture conn asks for, until the client stops it, its
// count is reached or the forwarder stops. hub is the forwarder's, nil
// when none runs.
func Serve(conn net.Conn, hub *Hub) error {
	defer conn.Close()
	req, sess, hello := accept(conn, hub)
	if sess == nil {
		return writeJSON(conn, hello)
	}
	defer sess.Close()
	sc := &streamConn{Conn: conn}
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-sess.Done():
			sc.cut(closeGrace)
		case <-ended:
		}
	}()
	s := &stream{w: bufio.NewWriterSize(sc, 256<<10), sess: sess, names: hello.Links, announced: len(hello.Links), count: req.Count}
	if err := writeJSON(s.w, hello); err != nil {
		return err
	}
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, conn) // the client shuts its side: stop
		close(stop)
	}()
	s.run(stop)
	sess.Close()
	s.drain()
	return s.end()
}

// accept reads conn's request and opens its session. Without one (sess
// nil), hello says why, for Serve to answer.
func accept(conn net.Conn, hub *Hub) (req Request, sess *Session, hello Hello) {
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	// Bounded as the first line is (control.ReadOp): a request is one
	// line, and a JSON value spread over several must not get more.
	if err := json.NewDecoder(io.LimitReader(conn, control.MaxRequest)).Decode(&req); err != nil {
		return req, nil, Hello{Error: fmt.Sprintf("read the capture request: %v", err), BadRequest: true}
	}
	conn.SetReadDeadline(time.Time{})
	if hub == nil {
		return req, nil, Hello{Error: "no forwarder is running"}
	}
	spec, err := hub.spec(req)
	if err != nil {
		return req, nil, Hello{Error: err.Error(), BadRequest: true}
	}
	if sess, err = hub.Open(spec); err != nil {
		return req, nil, Hello{Error: err.Error()}
	}
	names := sess.Links()
	for k, l := range spec.Links {
		// Removed, and its index maybe taken, since spec looked.
		if names[l] != req.Links[k] {
			sess.Close()
			return req, nil, Hello{Error: (&LinkGoneError{Link: req.Links[k]}).Error()}
		}
	}
	return req, sess, Hello{Links: names, Reasons: ReasonNames(), Snaplen: sess.spec.Snaplen, Workers: len(hub.points)}
}

// stream writes one session's records to its client, naming the links
// added since the Hello before their first record.
//
// Concurrency: Serve's goroutine alone.
type stream struct {
	w         *bufio.Writer
	sess      *Session
	names     []string // the session's links, as last read
	announced int      // links the client knows: the Hello's, then each NewLink
	count     uint64   // the request's limit (0: none)
	sent      uint64
	err       error // the first write error: nothing is written after it
}

// more reports whether the stream takes another record.
func (s *stream) more() bool { return s.err == nil && (s.count == 0 || s.sent < s.count) }

// send writes one record, announcing its link first if it is new, and
// reports whether the stream takes another (Session.Read's callback).
func (s *stream) send(rec []byte) bool {
	if link := int(le.Uint16(rec[8:])); link >= s.announced && s.err == nil {
		// The first record of a link added since: the session
		// numbered it before any worker could take its packets.
		s.names = s.sess.Links()
		for ; s.announced < len(s.names) && s.err == nil; s.announced++ {
			s.err = announce(s.w, s.names[s.announced])
		}
		if link >= s.announced {
			return s.err == nil // cannot be named: not sent
		}
	}
	if s.err == nil {
		_, s.err = s.w.Write(rec)
	}
	s.sent++
	return s.more()
}

// run sends what the session captures until stop (the client shut its
// side), the session's end, the count or a write error. While the rings
// are empty it flushes and polls them, from pollMin to pollMax apart.
func (s *stream) run(stop <-chan struct{}) {
	send := s.send
	t := time.NewTimer(pollMin)
	defer t.Stop()
	wait := pollMin
	for s.more() {
		if s.sess.Read(4096, send) > 0 {
			// Traffic may never leave the rings empty: look at the
			// stop between reads too.
			select {
			case <-stop:
				return
			case <-s.sess.Done():
				return
			default:
			}
			wait = pollMin
			continue
		}
		if s.err = s.w.Flush(); s.err != nil {
			return
		}
		t.Reset(wait)
		wait = min(2*wait, pollMax)
		select {
		case <-t.C:
		case <-stop:
			return
		case <-s.sess.Done():
			return
		}
	}
}

// drain sends what the closed session's rings still hold.
func (s *stream) drain() {
	send := s.send
	for s.more() && s.sess.Read(4096, send) > 0 {
	}
}

// end writes the end mark and the Totals.
func (s *stream) end() error {
	if s.err != nil {
		return s.err
	}
	var end [4]byte
	s.w.Write(end[:])
	totals := Totals{Captured: s.sent, Lost: s.sess.Lost()}
	if err := s.sess.Err(); err != nil {
		totals.Error = err.Error()
		var gone *LinkGoneError
		if errors.As(err, &gone) {
			totals.LinkGone = gone.Link
		}
	}
	if err := writeJSON(s.w, totals); err != nil {
		return err
	}
	return s.w.Flush()
}

// announce writes a NewLink.
func announce(w io.Writer, name string) error {
	var mark [4]byte
	le.PutUint32(mark[:], linkMark)
	if _, err := w.Write(mark[:]); err != nil {
		return err
	}
	return writeJSON(w, NewLink{Name: name})
}

// spec checks a request against the hub's links.
func (h *Hub) spec(req Request) (Spec, error) {
	var spec Spec
	var err error
	if spec.Dirs, err = ParseDir(req.Direction); err != nil {
		return spec, err
	}
	names := h.Links()
	for _, name := range req.Links {
		i := slices.Index(names, name)
		if i < 0 || name == "" {
			return spec, fmt.Errorf("link %q: this xdpfwd forwards %q", name, names)
		}
		spec.Links = append(spec.Links, i)
	}
	if req.Snaplen < 0 || req.Snaplen > DefaultSnaplen {
		return spec, fmt.Errorf("snaplen %d: want 1..%d", req.Snaplen, DefaultSnaplen)
	}
	spec.Snaplen = req.Snaplen
	if req.Buffer < 0 || req.Buffer > MaxBuffer {
		return spec, fmt.Errorf("buffer %d: want up to %d bytes", req.Buffer, MaxBuffer)
	}
	spec.Buffer = req.Buffer
	if len(req.Filter) > MaxFilter {
		return spec, fmt.Errorf("a filter of %d instructions: at most %d (a shorter expression)", len(req.Filter), MaxFilter)
	}
	if len(req.Filter) > 0 {
		if spec.Filter, err = cbpf.New(req.Filter); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Client is the capture tool's side of the stream.
type Client struct {
	conn   *net.UnixConn
	r      *bufio.Reader
	Hello  Hello
	links  []string
	totals Totals
	buf    []byte
}

// RequestError is a request the daemon refused as bad.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

// Dial connects to the control socket at path and starts the capture req
// describes.
func Dial(path string, req Request) (*Client, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	c := &Client{conn: conn, r: bufio.NewReaderSize(conn, 256<<10)}
	werr := writeJSON(conn, req)
	// A daemon that refuses a connection (busy: control.MaxConns) answers
	// and closes it, maybe before or during this write: its answer says
	// more than the write's broken pipe.
	line, err := c.r.ReadBytes('\n')
	if werr != nil && (err != nil || json.Unmarshal(line, &c.Hello) != nil || c.Hello.Error == "") {
		conn.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, werr)
	}
	if err == nil {
		err = json.Unmarshal(line, &c.Hello)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("control socket %s: read the answer: %w", path, err)
	}
	if c.Hello.Error != "" {
		conn.Close()
		if c.Hello.BadRequest {
			return nil, &RequestError{c.Hello.Error}
		}
		return nil, errors.New(c.Hello.Error)
	}
	c.links = slices.Clip(c.Hello.Links) // appended to: not in Hello's array
	return c, nil
}

// Links names the links by the numbers records give them: the Hello's,
// then those added while capturing, each announced before its first
// record. The caller must not modify it.
func (c *Client) Links() []string { return c.links }

// Next returns the next record (its Data valid until the next call), or
// io.EOF once the daemon has sent its Totals.
func (c *Client) Next() (Record, error) {
	var h [4]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return Record{}, fmt.Errorf("capture stream: %w", unexpected(err))
	}
	n := int(le.Uint32(h[:]))
	for n == linkMark {
		var l NewLink
		line, err := c.r.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &l)
		}
		if err != nil {
			return Record{}, fmt.Errorf("capture stream: a new link: %w", unexpected(err))
		}
		if len(c.links) >= int(noLink) {
			return Record{}, fmt.Errorf("capture stream: more than %d links", noLink)
		}
		c.links = append(c.links, l.Name)
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return Record{}, fmt.Errorf("capture stream: %w", unexpected(err))
		}
		n = int(le.Uint32(h[:]))
	}
	if n == 0 {
		line, err := c.r.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &c.totals)
		}
		if err != nil {
			return Record{}, fmt.Errorf("capture stream: totals: %w", unexpected(err))
		}
		return Record{}, io.EOF
	}
	if n < hdrLen || n > hdrLen+max(c.Hello.Snaplen, 0) {
		return Record{}, fmt.Errorf("capture stream: a record of %d bytes", n)
	}
	if cap(c.buf) < n {
		c.buf = make([]byte, n, hdrLen+c.Hello.Snaplen)
	}
	b := c.buf[:n]
	copy(b, h[:])
	if _, err := io.ReadFull(c.r, b[4:]); err != nil {
		return Record{}, fmt.Errorf("capture stream: %w", unexpected(err))
	}
	rec, _ := Parse(b)
	if rec.Link >= len(c.links) {
		return Record{}, fmt.Errorf("capture stream: a record of link %d, of %d named", rec.Link, len(c.links))
	}
	return rec, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Buffered is how many bytes of the stream are read and not yet returned.
func (c *Client) Buffered() int { return c.r.Buffered() }

// Stop asks the daemon to end the capture; Next then returns what is
// left, and io.EOF.
func (c *Client) Stop() error { return c.conn.CloseWrite() }

// Totals are the daemon's counts, once Next returned io.EOF.
func (c *Client) Totals() Totals { return c.totals }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
