package linkop

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// Client is a connection to a daemon's control socket for link requests.
type Client struct {
	path string
	conn net.Conn
	r    *bufio.Reader
}

// RequestError is a daemon's refusal of a request as malformed or
// unfitting (Reply.BadRequest): the CLI exits 2 for it.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

// Dial connects to the control socket at path, within ListTimeout.
func Dial(path string) (*Client, error) {
	conn, err := net.DialTimeout("unix", path, ListTimeout)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return &Client{path: path, conn: conn, r: bufio.NewReader(conn)}, nil
}

// Close ends the connection.
func (c *Client) Close() error { return c.conn.Close() }

// ListLinks asks for the daemon's links.
func (c *Client) ListLinks() (List, error) {
	rep, err := c.do(Request{Op: OpList}, ListTimeout)
	if err != nil {
		return List{}, err
	}
	return List{Mode: rep.Mode, Links: rep.Links, Queues: rep.Queues, AddRefused: rep.AddRefused,
		Health: rep.Health, HealthDetail: rep.HealthDetail, CPUs: rep.CPUs, Features: rep.Features}, nil
}

// AddLink asks the daemon to forward the link name too. An error wraps
// ErrExists, ErrExistsOther, ErrNoSuchLink, ErrUnsupported, ErrFull,
// ErrMTU, ErrMACInUse, ErrMACNoRoom or a
// *RequestError (a refusal: the request cannot be met as it is) where
// they apply; any other is a failure to answer it (try again).
func (c *Client) AddLink(name string) error { return c.AddLinkWith(name, AddOptions{}) }

// AddLinkWith is AddLink with options: the port security of a pod's link
// (its MAC and IPs). An older daemon, which knows none of them, adds the
// link without; one that finds them wrong refuses (a *RequestError).
func (c *Client) AddLinkWith(name string, o AddOptions) error {
	if err := CheckName(name); err != nil {
		return &RequestError{"link add: " + err.Error()}
	}
	_, err := c.do(Request{Op: OpAdd, Name: name, AddOptions: o}, AddTimeout)
	return err
}

// PodOptions are the options of a pod's link: its MAC address and its IP
// addresses, for the daemon's switch to secure its port (unless the
// daemon runs with --port-security off).
func PodOptions(mac net.HardwareAddr, ips []net.IP) AddOptions {
	o := AddOptions{MAC: mac.String()}
	if len(mac) == 0 {
		o.MAC = ""
	}
	for _, a := range ips {
		if a != nil {
			o.IPs = append(o.IPs, a.String())
		}
	}
	return o
}

// DelLink asks the daemon to stop forwarding the link name. An error
// wraps ErrUnknownLink when it did not forward it.
func (c *Client) DelLink(name string) error {
	if err := CheckName(name); err != nil {
		return &RequestError{"link del: " + err.Error()}
	}
	_, err := c.do(Request{Op: OpDel, Name: name}, AddTimeout)
	return err
}

func (c *Client) do(req Request, timeout time.Duration) (Reply, error) {
	deadline := time.Now().Add(timeout)
	rep, err := c.once(req, deadline)
	if errors.Is(err, ErrHandedOver) {
		// Its successor serves the socket now: ask it, once.
		conn, derr := net.DialTimeout("unix", c.path, time.Until(deadline))
		if derr != nil {
			return rep, fmt.Errorf("%w (asking its successor: %v)", err, derr)
		}
		c.conn.Close()
		c.conn, c.r = conn, bufio.NewReader(conn)
		rep, err = c.once(req, deadline)
	}
	return rep, err
}

// once sends req on the connection and reads the answer, by deadline.
func (c *Client) once(req Request, deadline time.Time) (Reply, error) {
	c.conn.SetDeadline(deadline)
	defer c.conn.SetDeadline(time.Time{})
	b, _ := json.Marshal(req)
	_, werr := c.conn.Write(append(b, '\n'))
	// A daemon that refuses a connection (busy: control.MaxConns) answers
	// and closes it, maybe before this write: its answer says more than
	// the write's broken pipe.
	line, err := c.r.ReadBytes('\n')
	if werr != nil && (err != nil || !json.Valid(line)) {
		return Reply{}, fmt.Errorf("control socket %s: %w", c.path, werr)
	}
	if err != nil {
		return Reply{}, fmt.Errorf("control socket %s: read the answer to %s: %w", c.path, req.Op, err)
	}
	var rep Reply
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(line, &probe); err != nil {
		return Reply{}, fmt.Errorf("control socket %s: answer to %s: %w", c.path, req.Op, err)
	}
	if _, ok := probe["ok"]; !ok {
		// A daemon that knows only capture took the request for one.
		return Reply{}, fmt.Errorf("control socket %s: %w (the daemon answered as to a capture: an xdpfwd older than link ops)", c.path, ErrUnsupported)
	}
	json.Unmarshal(line, &rep)
	if rep.OK {
		return rep, nil
	}
	msg := rep.Error
	if msg == "" {
		msg = "refused, without a reason"
	}
	var base error
	switch rep.Code {
	case CodeUnknownLink:
		base = ErrUnknownLink
	case CodeNoSuchLink:
		base = ErrNoSuchLink
	case CodeExists:
		base = ErrExists
	case CodeExistsOther:
		base = ErrExistsOther
	case CodeMACInUse:
		base = ErrMACInUse
	case CodeMACNoRoom:
		base = ErrMACNoRoom
	case CodeHandedOver:
		base = ErrHandedOver
	case CodeUnsupported:
		base = ErrUnsupported
	case CodeFull:
		base = ErrFull
	case CodeMTU:
		base = ErrMTU
	}
	switch {
	case rep.BadRequest && base != nil:
		return rep, &codedRequestError{RequestError{msg}, base}
	case rep.BadRequest:
		return rep, &RequestError{msg}
	case base != nil:
		return rep, &codedError{msg, base}
	}
	return rep, errors.New(msg)
}

// codedError is a daemon's message that errors.Is matches to its code's
// error.
type codedError struct {
	msg  string
	base error
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.base }

type codedRequestError struct {
	RequestError
	base error
}

func (e *codedRequestError) Unwrap() []error { return []error{&e.RequestError, e.base} }
