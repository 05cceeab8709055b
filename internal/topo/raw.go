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
