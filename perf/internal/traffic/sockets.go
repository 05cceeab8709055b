// UDP sockets in a namespace, and the bounds every generator keeps.

package traffic

import (
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// Sizes and bounds of the generators.
const (
	udpBatch    = 64      // datagrams per sendmmsg/recvmmsg
	UDPHeaders  = 20 + 8  // IPv4 + UDP: a workload's size is the IP packet length
	udpRcvBuf   = 4 << 20 // receiver socket buffer (SO_RCVBUFFORCE)
	MaxPackets  = 1 << 31 // hard bound on any generator, whatever the duration
	maxWrites   = 1 << 24 // hard bound on the writes of one TCP stream or RR connection
	sockTimeout = 50 * time.Millisecond
)

// Sockaddr4 is a as an IPv4 socket address.
func Sockaddr4(a netip.AddrPort) *unix.SockaddrInet4 {
	return &unix.SockaddrInet4{Addr: a.Addr().As4(), Port: int(a.Port())}
}

// UDPSocket opens a blocking IPv4 UDP socket in ns bound to local on an
// ephemeral port, with send and receive timeouts so no loop can hang on it.
func UDPSocket(ns *topo.NS, local netip.Addr) (fd int, port int, err error) {
	return UDPSocketOn(ns, netip.AddrPortFrom(local, 0))
}

// UDPSocketOn is UDPSocket bound to local's port (0: ephemeral).
func UDPSocketOn(ns *topo.NS, local netip.AddrPort) (fd int, port int, err error) {
	err = ns.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err = unix.Bind(fd, Sockaddr4(local)); err != nil {
			unix.Close(fd)
			return err
		}
		tv := unix.NsecToTimeval(int64(sockTimeout))
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
		sa, err := unix.Getsockname(fd)
		if err != nil {
			unix.Close(fd)
			return err
		}
		port = sa.(*unix.SockaddrInet4).Port
		return nil
	})
	if err != nil {
		return -1, 0, fmt.Errorf("udp socket on %s in %s: %w", local, ns.Name, err)
	}
	return fd, port, nil
}
