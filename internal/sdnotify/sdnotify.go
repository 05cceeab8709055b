// Package sdnotify tells systemd what the daemon is doing, as sd_notify(3)
// does: ready, stopping, a status line. It speaks only when systemd asked
// ($NOTIFY_SOCKET), and never blocks: a datagram systemd has no room for
// is an error, not a wait. (A handover's new main process is told through
// the PID file, not MAINPID=: see cmd/xdpfwd's successor.go.)
package sdnotify

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Socket is the environment variable that names systemd's socket.
const Socket = "NOTIFY_SOCKET"

// Notify sends the assignments (READY=1, STATUS=…, STOPPING=1) in one
// datagram; false without an error when systemd did not ask.
func Notify(assignments ...string) (bool, error) {
	addr, err := socket()
	if addr == nil {
		return false, err
	}
	if err := send(addr, strings.Join(assignments, "\n")); err != nil {
		return false, err
	}
	return true, nil
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
// the sender's credentials from it).
func send(addr *unix.SockaddrUnix, msg string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer unix.Close(fd)
	// A full queue (systemd busy) fails now rather than holds the caller.
	if err := unix.Sendmsg(fd, []byte(msg), nil, addr, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("sd_notify %s: %w", addr.Name, err)
	}
	return nil
}
