// Many UDP flows at once, paced: the delivery workload's sender.

package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// FlowSend sends size-byte IP packets round-robin over flows sockets
// (one per source port), paced at rate packets/s, count packets in all,
// and returns how many it offered (a datagram the socket refused counts:
// it is lost before the wire).
func FlowSend(ctx context.Context, ns *topo.NS, local netip.Addr, to netip.AddrPort, flows, size int, rate float64, count int, deadline time.Time) (sent int, err error) {
	fds := make([]int, 0, flows)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for range flows {
		fd, _, err := UDPSocket(ns, local)
		if err != nil {
			return 0, err
		}
		fds = append(fds, fd)
		if err := unix.Connect(fd, Sockaddr4(to)); err != nil {
			return 0, fmt.Errorf("connect to %s: %w", to, err)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, max(8, size-UDPHeaders))
	start := time.Now()
	for sent < count && ctx.Err() == nil {
		now := time.Now()
		if !now.Before(deadline) {
			return sent, fmt.Errorf("sent only %d of %d datagrams by the deadline", sent, count)
		}
		due := min(count, int(rate*now.Sub(start).Seconds())) - sent
		if due <= 0 {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		for range due {
			binary.BigEndian.PutUint64(buf, uint64(sent))
			if _, err := unix.Write(fds[sent%len(fds)], buf); err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ECONNREFUSED) {
					sent++ // offered, and lost before the wire
					continue
				}
				return sent, fmt.Errorf("write: %w", err)
			}
			sent++
		}
	}
	return sent, ctx.Err()
}
