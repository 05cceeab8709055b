// Package sdnotify tells systemd what the daemon is doing, as sd_notify(3)
// does: ready, stopping, a status line, and that its main process is now
// another (a successor that took the datapath over). It speaks only when
// systemd asked ($NOTIFY_SOCKET), and never blocks the caller longer than
// the timeout it is given: a daemon without systemd loses nothing.
package sdnotify

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Socket is the environment variable that names systemd's socket.
const Socket = "NOTIFY_SOCKET"

// Notify sends the assignments (READY=1, STATUS=…, MAINPID=…) in one
// datagram; false without an error when systemd did not ask.
func Notify(assignments ...string) (bool, error) {
	addr, err := socket()
	if addr == nil {
		return false, err
	}
	if err := send(addr, strings.Join(assignments, "\n"), nil); err != nil {
		return false, err
	}
	return true, nil
}

// Barrier returns once systemd has read every message sent before it
// (BARRIER=1: it closes the pipe end that came with it), or after
// timeout: what a process must wait for before it exits when its last
// message (MAINPID=) has to be read while it still lives.
func Barrier(timeout time.Duration) error {
	addr, err := socket()
	if addr == nil {
		return err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("sd_notify barrier: %w", err)
	}
	r := os.NewFile(uintptr(p[0]), "barrier") // non-blocking: the deadline holds
	defer r.Close()
	err = send(addr, "BARRIER=1", unix.UnixRights(p[1]))
	unix.Close(p[1])
	if err != nil {
		return err
	}
	r.SetReadDeadline(time.Now().Add(timeout))
	var b [1]byte
	if _, err := r.Read(b[:]); !errors.Is(err, io.EOF) {
		return fmt.Errorf("sd_notify barrier: not acknowledged: %v", err)
	}
	return nil
}

// socket is $NOTIFY_SOCKET's address: nil, nil when it is unset. An
// abstract socket's name starts with @, which unix spells the same.
func socket() (*unix.SockaddrUnix, error) {
	path := os.Getenv(Socket)
	if path == "" {
		return nil, nil
	}
	if path[0] != '/' && path[0] != '@' {
		return nil, fmt.Errorf("sd_notify: %s=%q: neither a path nor an abstract name", Socket, path)
	}
	return &unix.SockaddrUnix{Name: path}, nil
}

// send is one datagram to addr, from a socket of its own (systemd reads
// the sender's credentials from it), with oob's descriptors.
func send(addr *unix.SockaddrUnix, msg string, oob []byte) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer unix.Close(fd)
	// A full queue (systemd busy) fails now rather than holds the caller.
	if err := unix.Sendmsg(fd, []byte(msg), oob, addr, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("sd_notify %s: %w", addr.Name, err)
	}
	return nil
}
