// Package control is xdpfwd's control endpoint: a unix socket, never a
// network address, through which `xdpfwd capture`, `xdpfwd link` and the
// CNI plugin reach a running daemon. ReadOp tells their requests apart by
// the first line's "op" (none: a capture).
//
// It owns the socket file: Listen creates its directory if missing,
// replaces a stale socket (one nobody answers on) but never a live one or
// a file that is not a socket, binds in a directory of its own (mode
// 0700) and renames the socket into place once it is mode 0600, so that
// no other user can reach it at any moment; Close removes it if it is
// still the one Listen made. It serves only root and the daemon's own
// user (SO_PEERCRED), each connection on a goroutine of its own, at most
// MaxConns at once, and never reads packet memory itself.
package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Dir is where daemons put their sockets by default.
const Dir = "/run/xdpfwd"

// DefaultPath is the socket of a daemon whose first link is link:
// /run/xdpfwd/LINK.sock. A link belongs to one daemon at a time, so the
// name tells the daemons of a host apart.
func DefaultPath(link string) string { return filepath.Join(Dir, link+".sock") }

// ErrInUse: another process answers on the socket.
var ErrInUse = errors.New("another process is listening on it")

// MaxConns bounds the connections a Server serves at once. A daemon's
// clients are few: at most capture.MaxSessions (4) captures, and
// `xdpfwd link` and the CNI plugin, a connection per command or per
// ADD/DEL/CHECK/GC while it runs (a runtime that starts pods in parallel
// runs a few at a time). A client beyond it is told so in one line and
// closed (Busy): the CNI plugin's caller tries again later. With
// MaxRequest, it bounds what clients can make the daemon hold to
// MaxConns*MaxRequest (8 MiB).
const MaxConns = 32

// RequestGrace is how long a connection may go without a whole request
// line and keep its place when all MaxConns are taken: a new connection
// then takes the place of the one that has waited longest (Evicted). A
// client writes its request as soon as it connects; one that holds a
// place with a partial line must not lock the others out until its
// read deadline.
const RequestGrace = time.Second

// Server is a listening control socket.
type Server struct {
	path string
	ln   *net.UnixListener
	ino  uint64
	// released: the socket is a successor's (Release): Close leaves the
	// file.
	released atomic.Bool
	wg       sync.WaitGroup
	once     sync.Once
	closed   chan struct{}
	refused  atomic.Uint64
	errs     atomic.Uint64
	busy     atomic.Uint64
	evicted  atomic.Uint64
	grace    time.Duration // RequestGrace; tests shorten it

	mu    sync.Mutex
	conns map[*conn]struct{}
}

// conn is a served connection: since its accept, and whether its request
// line was read (ReadOp tells it), after which it keeps its place.
type conn struct {
	*net.UnixConn
	since time.Time
	asked atomic.Bool
}

// UnixConn is the unix connection under c, a connection Serve handed a
// handler (or one ReadOp returned), for what plain reads and writes
// cannot do (SCM_RIGHTS); nil if it is not one.
func UnixConn(c net.Conn) *net.UnixConn {
	for {
		switch x := c.(type) {
		case *net.UnixConn:
			return x
		case *conn:
			return x.UnixConn
		case *replayConn:
			c = x.Conn
		default:
			return nil
		}
	}
}

func (c *conn) requestRead() { c.asked.Store(true) }

// Listen creates the control socket at path.
func Listen(path string) (*Server, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := clearStale(path); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// bind(2) makes the file with mode 0777 &^ umask, connectable from
	// that moment on; chmod comes after, and umask is the whole process's.
	// So bind where only we can reach (a directory of mode 0700, on the
	// same file system), chmod there, then rename into place.
	priv, err := os.MkdirTemp(dir, ".xdpfwd-control-")
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	defer os.Remove(priv)
	tmp := filepath.Join(priv, "sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*Server, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(tmp, &st); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return &Server{path: path, ln: ln, ino: st.Ino, closed: make(chan struct{}), conns: map[*conn]struct{}{}, grace: RequestGrace}, nil
}

// clearStale removes a socket at path that nobody answers on.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("exists and is not a socket")
	}
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
		return ErrInUse
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return err
	}
	return os.Remove(path)
}

// Path is where the socket is.
func (s *Server) Path() string { return s.path }

// Listener is the listening socket as a file, a copy the caller closes,
// and the inode of the socket's file at Path: for a successor to serve
// the same socket (ListenFile) without a moment in which it is not.
func (s *Server) Listener() (*os.File, uint64, error) {
	f, err := s.ln.File()
	if err != nil {
		return nil, 0, fmt.Errorf("control socket %s: %w", s.path, err)
	}
	return f, s.ino, nil
}

// Release stops this process from accepting on the socket, which a
// successor serves now (ListenFile), and leaves its file where it is:
// the connections waiting to be accepted are the successor's. Those
// being served go on; Close waits for them as ever.
func (s *Server) Release() {
	s.released.Store(true)
	s.once.Do(func() {
		close(s.closed)
		s.ln.Close()
	})
}

// ListenFile serves the control socket at path that a predecessor
// listened on, from its listener (Listener: f, which the Server owns from
// then on, and the inode of the socket's file, which Close removes only
// if it is still that one).
func ListenFile(path string, ino uint64, f *os.File) (*Server, error) {
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("control socket %s: inherited listener: %w", path, err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: inherited listener is a %T, not a unix socket's", path, ln)
	}
	ul.SetUnlinkOnClose(false)
	return &Server{path: path, ln: ul, ino: ino, closed: make(chan struct{}), conns: map[*conn]struct{}{}, grace: RequestGrace}, nil
}

// Serve accepts connections and runs handle on each, on a goroutine of its
// own, until Close. A connection from a user other than root or the
// daemon's is closed at once (Refused). Beyond MaxConns, a connection
// takes the place of one that has not sent its request within
// RequestGrace (Evicted), or is told the socket is busy and closed
// (Busy); either gets one JSON line, {"ok":false,"error":"...","code":"busy"},
// which both a capture client (its Hello's error) and a link client read. handle
// should read the request with ReadOp, which marks the connection as
// having sent it. Accept errors other than a closed listener (EMFILE: out
// of descriptors) are retried after a pause that doubles up to a second,
// as net/http does, not in a busy loop.
func (s *Server) Serve(handle func(net.Conn)) {
	var pause time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.errs.Add(1)
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-s.closed:
				t.Stop()
				return
			}
			continue
		}
		pause = 0
		if !allowed(c) {
			s.refused.Add(1)
			c.Close()
			continue
		}
		cc := &conn{UnixConn: c, since: time.Now()}
		if !s.admit(cc) {
			s.busy.Add(1)
			writeLine(c, errorLine{Error: fmt.Sprintf("control socket busy: %d connections open, the most it serves at once; try again", MaxConns), Code: CodeBusy})
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			handle(cc)
			s.mu.Lock()
			delete(s.conns, cc)
			s.mu.Unlock()
		}()
	}
}

// admit gives c a place among the MaxConns, if need be the place of the
// connection that has waited longest, beyond RequestGrace, for its
// request; false if there is none.
func (s *Server) admit(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) >= MaxConns {
		var old *conn
		for o := range s.conns {
			if !o.asked.Load() && c.since.Sub(o.since) >= s.grace && (old == nil || o.since.Before(old.since)) {
				old = o
			}
		}
		if old == nil {
			return false
		}
		// Its handler, blocked reading the request, fails at once and
		// returns; it is no longer counted from now.
		delete(s.conns, old)
		s.evicted.Add(1)
		writeLine(old, errorLine{Error: fmt.Sprintf("control socket: closed, no request within %v while all %d connections were taken; try again", s.grace, MaxConns), Code: CodeBusy})
		old.Close()
	}
	s.conns[c] = struct{}{}
	return true
}

// CodeBusy is the "code" of the line a connection gets when it is refused
// (busy) or closed for another (evicted): not the request's fault, try
// again. The other codes are linkop's.
const CodeBusy = "busy"

// errorLine is what a client gets when its connection ends before its
// request is served: a capture client reads it as a Hello's error, a link
// client as a Reply's.
type errorLine struct {
	OK         bool   `json:"ok"`
	Error      string `json:"error"`
	BadRequest bool   `json:"bad_request,omitempty"`
	Code       string `json:"code,omitempty"`
}

// RefuseRequest tells a client in one JSON line why its request was not
// read (ReadOp's error: too long, not within its time), as the request's
// fault: {"ok":false,"error":...,"bad_request":true}.
func RefuseRequest(c net.Conn, err error) error {
	return writeLine(c, errorLine{Error: "control socket: " + err.Error(), BadRequest: true})
}

// writeLine waits at most 100 ms for the socket: the line fits in the
// buffer of a connection that was sent nothing yet, and the accept loop
// calls it.
func writeLine(c net.Conn, v errorLine) error {
	b, _ := json.Marshal(v)
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	defer c.SetWriteDeadline(time.Time{})
	_, err := c.Write(append(b, '\n'))
	return err
}

// allowed: the peer is root or runs as the daemon's user. The socket's
// mode says the same; this holds even if someone loosens it.
func allowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil || err != nil {
		return false
	}
	return cred.Uid == 0 || cred.Uid == uint32(os.Geteuid())
}

// Refused is how many connections were closed unserved: another user's.
func (s *Server) Refused() uint64 { return s.refused.Load() }

// Busy is how many connections were closed unserved, told the socket was
// busy: MaxConns were open.
func (s *Server) Busy() uint64 { return s.busy.Load() }

// Evicted is how many connections were closed before their request was
// read, to make place for a new one (RequestGrace).
func (s *Server) Evicted() uint64 { return s.evicted.Load() }

// AcceptErrors is how many accepts failed (each retried after a pause).
func (s *Server) AcceptErrors() uint64 { return s.errs.Load() }

// Close stops accepting, removes the socket file (if it is still ours)
// and waits for the connections' handlers to return: up to grace, then
// it closes the connections still open (a client that stopped reading).
func (s *Server) Close(grace time.Duration) error {
	var err error
	s.once.Do(func() {
		close(s.closed)
		err = s.ln.Close()
		var st syscall.Stat_t
		if syscall.Stat(s.path, &st) == nil && st.Ino == s.ino && !s.released.Load() {
			os.Remove(s.path)
		}
	})
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		<-done
	}
	return err
}

// Find picks the control socket of the daemon forwarding links (any of
// them) when no path was given: /run/xdpfwd/LINK.sock for one of links,
// else the only socket in /run/xdpfwd.
func Find(links []string) (string, error) {
	for _, l := range links {
		if p := DefaultPath(l); isSocket(p) {
			return p, nil
		}
	}
	m, _ := filepath.Glob(filepath.Join(Dir, "*.sock"))
	var socks []string
	for _, p := range m {
		if isSocket(p) {
			socks = append(socks, p)
		}
	}
	switch len(socks) {
	case 1:
		return socks[0], nil
	case 0:
		return "", fmt.Errorf("no xdpfwd control socket in %s: is xdpfwd running (with --control)? give its socket with --control PATH", Dir)
	}
	return "", fmt.Errorf("several xdpfwd daemons run (%s): choose one with --control PATH", strings.Join(socks, ", "))
}

func isSocket(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}
