package topo

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// SendRaw sends frames, as they are, out of eth0 of ns through a packet
// socket, in order. A send the socket buffer refuses for now is retried
// until timeout.
func SendRaw(ns *NS, frames [][]byte, timeout time.Duration) error {
	return ns.Do(func() error {
		fd, ifi, err := packetSocket(false)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}
		deadline := time.Now().Add(timeout)
		for _, f := range frames {
			for {
				err := unix.Sendto(fd, f, 0, to)
				if err == nil {
					break
				}
				if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ENOBUFS) || time.Now().After(deadline) {
					return err
				}
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	})
}

// RawReceiver receives every frame that eth0 of a namespace gets, as a
// packet socket's tap sees it: before the stack, with VLAN tags the
// kernel stripped no longer in the bytes.
type RawReceiver struct{ fd int }

// ListenRaw opens a RawReceiver on eth0 of ns.
func ListenRaw(ns *NS) (*RawReceiver, error) {
	r := &RawReceiver{fd: -1}
	err := ns.Do(func() error {
		fd, _, err := packetSocket(true)
		r.fd = fd
		return err
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Next returns the next frame, or an error once deadline passes first.
func (r *RawReceiver) Next(deadline time.Time) ([]byte, error) {
	buf := make([]byte, 65536)
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, unix.ETIMEDOUT
		}
		tv := unix.NsecToTimeval(int64(min(wait, 100*time.Millisecond)))
		if err := unix.SetsockoptTimeval(r.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, err
		}
		n, _, err := unix.Recvfrom(r.fd, buf, 0)
		switch {
		case err == nil:
			return buf[:n], nil
		case !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
			return nil, err
		}
	}
}

// Close closes the socket.
func (r *RawReceiver) Close() error { return unix.Close(r.fd) }
