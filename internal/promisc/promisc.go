// Package promisc holds links in promiscuous mode for as long as a process
// keeps a file descriptor open, the way tcpdump does: a packet socket's
// PACKET_MR_PROMISC membership, which the kernel drops when the socket
// closes, however the process ends. The IFF_PROMISC flag set through
// netlink or SIOCSIFFLAGS would instead outlive a process killed with
// SIGKILL, and leave the NIC accepting every frame of the wire.
//
// The socket is opened with protocol 0, so the kernel hooks it into no
// receive path: it receives nothing and costs nothing per packet.
package promisc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Membership is one link's promiscuous membership, held until Close.
type Membership struct {
	fd     int
	ifname string
}

// Join puts the link with index ifindex (named ifname, for messages) into
// promiscuous mode: its promiscuity count goes up by one until Close, or
// until the process ends. The link is looked up in the network namespace
// of the calling thread.
func Join(ifname string, ifindex int) (*Membership, error) {
	// Protocol 0: no protocol hook is registered, by socket(2) nor by a
	// bind, so not a single frame is queued to this socket.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("promiscuous mode on %s: packet socket: %w", ifname, err)
	}
	mreq := unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("promiscuous mode on %s (PACKET_ADD_MEMBERSHIP PACKET_MR_PROMISC, ifindex %d): %w", ifname, ifindex, err)
	}
	return &Membership{fd: fd, ifname: ifname}, nil
}

// Close ends the membership: the kernel lowers the link's promiscuity
// count when the socket closes. Calling it again does nothing.
func (m *Membership) Close() error {
	if m == nil || m.fd < 0 {
		return nil
	}
	fd := m.fd
	m.fd = -1
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("promiscuous mode on %s: close: %w", m.ifname, err)
	}
	return nil
}
