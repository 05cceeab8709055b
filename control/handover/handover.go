// Package handover is the wire over which a running xdpfwd hands its
// datapath to its successor (xdpfwd run --takeover), on its control
// socket: after the successor's request line ({"op":"handover"}), framed
// JSON messages (a 4-byte big-endian length, then the JSON) and file
// descriptors passed with SCM_RIGHTS, in batches the kernel takes. Frames
// are read exactly, never ahead, so that the descriptors sent with one
// arrive with its read. It owns no state of either daemon's.
package handover

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Op is the request line's op.
const Op = "handover"

// maxFrame bounds a message: a switch's state with a full table (16 Mi
// entries at about 80 bytes) is the largest a daemon sends.
const maxFrame = 2 << 30

// filesPerMsg is how many descriptors go in one message: the kernel
// takes at most 253 (SCM_MAX_FD).
const filesPerMsg = 200

// Conn is one side of a handover.
type Conn struct {
	c *net.UnixConn
	r io.Reader // reads of c, after what a server read of it already
	// out is where Send frames a message, kept from one to the next so
	// that a message no larger than one before it, or than Prepare's,
	// writes memory already touched.
	out bytes.Buffer
}

// Accept is the predecessor's side of a handover over c, whose reads
// come from r: a server's connection that reads the request line again
// first (control.ReadOp's), which Accept reads past.
func Accept(c *net.UnixConn, r io.Reader) (*Conn, error) {
	var b [1]byte
	for n := 0; ; n++ {
		if n > 4096 {
			return nil, errors.New("handover: a request line of over 4 KiB")
		}
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("handover: request: %w", err)
		}
		if b[0] == '\n' {
			return &Conn{c: c, r: r}, nil
		}
	}
}

// Dial connects to the control socket at path and asks the daemon there
// to hand over.
func Dial(path string, timeout time.Duration) (*Conn, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, fmt.Errorf("handover: control socket %s: %w", path, err)
	}
	uc := c.(*net.UnixConn)
	uc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := uc.Write([]byte(`{"op":"` + Op + `"}` + "\n")); err != nil {
		uc.Close()
		return nil, fmt.Errorf("handover: control socket %s: %w", path, err)
	}
	uc.SetWriteDeadline(time.Time{})
	return &Conn{c: uc, r: uc}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Send writes v as one message.
func (c *Conn) Send(v any) error {
	if err := c.frame(v); err != nil {
		return err
	}
	if _, err := c.c.Write(c.out.Bytes()); err != nil {
		return fmt.Errorf("handover: send: %w", err)
	}
	return nil
}

// Prepare frames v, a message like one to be sent later, and sends
// nothing: a Send of one no larger then writes memory this process has
// touched already. A page touched the first time costs a fault, 30 µs on
// a VM whose memory the host backs lazily (4 MiB took 30 ms on this
// project's CI machines), which a message sent while the datapath is
// frozen would add to the pause.
func (c *Conn) Prepare(v any) error {
	err := c.frame(v)
	c.out.Reset()
	return err
}

// frame puts v, its length first, in out.
func (c *Conn) frame(v any) error {
	c.out.Reset()
	c.out.Write(make([]byte, 4))
	if err := json.NewEncoder(&c.out).Encode(v); err != nil {
		return fmt.Errorf("handover: %w", err)
	}
	b := c.out.Bytes()
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return nil
}

// Recv reads one message into v, within timeout. A peer that closed the
// connection first is io.EOF.
func (c *Conn) Recv(v any, timeout time.Duration) error {
	c.c.SetReadDeadline(time.Now().Add(timeout))
	defer c.c.SetReadDeadline(time.Time{})
	var head [4]byte
	if _, err := io.ReadFull(c.r, head[:]); err != nil {
		return fmt.Errorf("handover: receive: %w", err)
	}
	return c.body(binary.BigEndian.Uint32(head[:]), v)
}

func (c *Conn) body(n uint32, v any) error {
	if n > maxFrame {
		return fmt.Errorf("handover: a message of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return fmt.Errorf("handover: receive: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("handover: message: %w", err)
	}
	return nil
}

// SendFiles passes files (which the caller still owns) in messages of at
// most filesPerMsg descriptors each.
func (c *Conn) SendFiles(files []*os.File) error {
	for len(files) > 0 {
		k := min(len(files), filesPerMsg)
		fds := make([]int, k)
		for i, f := range files[:k] {
			fd, err := descriptor(f)
			if err != nil {
				return fmt.Errorf("handover: send %s: %w", f.Name(), err)
			}
			fds[i] = fd
		}
		b, _ := json.Marshal(k)
		msg := append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
		_, _, err := c.c.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
		runtime.KeepAlive(files)
		if err != nil {
			return fmt.Errorf("handover: send %d files: %w", k, err)
		}
		files = files[k:]
	}
	return nil
}

// descriptor is f's descriptor, read without f.Fd, which would put the
// open file description (shared with every duplicate: a listener still
// accepting, a socket still forwarding) in blocking mode, and a blocked
// accept would then hold up the listener's Close.
func descriptor(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(d uintptr) { fd = int(d) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// RecvFiles receives n files SendFiles sent, within timeout; the caller
// owns them.
func (c *Conn) RecvFiles(n int, timeout time.Duration) (files []*os.File, err error) {
	c.c.SetReadDeadline(time.Now().Add(timeout))
	defer c.c.SetReadDeadline(time.Time{})
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	oob := make([]byte, unix.CmsgSpace(filesPerMsg*4))
	for len(files) < n {
		var head [4]byte
		// The descriptors come with the first byte of their message:
		// its length, read alone.
		k, oobn, _, _, err := c.c.ReadMsgUnix(head[:], oob)
		if err != nil {
			return files, fmt.Errorf("handover: receive files: %w", err)
		}
		if k < len(head) {
			if _, err := io.ReadFull(c.c, head[k:]); err != nil {
				return files, fmt.Errorf("handover: receive files: %w", err)
			}
		}
		got, err := parseRights(oob[:oobn])
		if err != nil {
			return files, err
		}
		for _, fd := range got {
			files = append(files, os.NewFile(uintptr(fd), "handed-over"))
		}
		var want int
		if err := c.body(binary.BigEndian.Uint32(head[:]), &want); err != nil {
			return files, err
		}
		if want != len(got) {
			return files, fmt.Errorf("handover: a message of %d files came with %d", want, len(got))
		}
	}
	if len(files) != n {
		return files, fmt.Errorf("handover: %d files, want %d", len(files), n)
	}
	return files, nil
}

// parseRights is the descriptors of an SCM_RIGHTS control message, each
// made close-on-exec.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("handover: control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range got {
			unix.CloseOnExec(fd)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// Closed reports whether err says the peer went away: its process died
// or gave up.
func Closed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
