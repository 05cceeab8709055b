// The latency workload's echo: every request back to its sender.

package traffic

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// UDPEcho answers every datagram on a socket in ns with itself.
type UDPEcho struct {
	fd    int
	Port  int
	Count atomic.Uint64
	stop  atomic.Bool
	done  chan error
}

// NewUDPEcho starts an echo on an ephemeral port of local in ns, for
// maxCount datagrams at most, until Close or deadline.
func NewUDPEcho(ns *topo.NS, local netip.Addr, deadline time.Time, maxCount int) (*UDPEcho, error) {
	fd, port, err := UDPSocket(ns, local)
	if err != nil {
		return nil, err
	}
	e := &UDPEcho{fd: fd, Port: port, done: make(chan error, 1)}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, 2048)
		for n := 0; n < maxCount && !e.stop.Load() && time.Now().Before(deadline); {
			k, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				e.done <- fmt.Errorf("echo recvfrom: %w", err)
				return
			}
			if err := unix.Sendto(fd, buf[:k], 0, from); err != nil && !errors.Is(err, unix.EAGAIN) {
				e.done <- fmt.Errorf("echo sendto: %w", err)
				return
			}
			e.Count.Add(1)
			n++
		}
		e.done <- nil
	}()
	return e, nil
}

// Close stops the echo and closes its socket.
func (e *UDPEcho) Close() error {
	e.stop.Store(true)
	err := <-e.done // within sockTimeout
	unix.Close(e.fd)
	return err
}
