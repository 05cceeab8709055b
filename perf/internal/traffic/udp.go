// One UDP flow: the sendmmsg sender and the recvmmsg receiver that counts
// datagrams and those out of order.

package traffic

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// UDPReceiver counts datagrams on a socket until stopped, and those that
// arrive after a higher sequence number (out of order). Without flows the
// payload starts with one 64-bit sequence number; with flows > 0 it starts
// with a 32-bit flow id and a 32-bit sequence number of that flow, and
// order is counted per flow.
type UDPReceiver struct {
	fd         int
	Port       int
	flows      int
	Packets    atomic.Uint64
	Bytes      atomic.Uint64
	OutOfOrder atomic.Uint64
	stop       atomic.Bool
	deadline   time.Time
	done       chan error
}

// NewUDPReceiver starts a receiver of one sequenced flow on an ephemeral
// port of local in ns, until Close or deadline.
func NewUDPReceiver(ns *topo.NS, local netip.Addr, deadline time.Time) (*UDPReceiver, error) {
	return NewSeqReceiver(ns, netip.AddrPortFrom(local, 0), 0, deadline)
}

// NewSeqReceiver is a receiver on local (port 0: ephemeral) of flows
// sequenced flows (0: one, with a 64-bit sequence number).
func NewSeqReceiver(ns *topo.NS, local netip.AddrPort, flows int, deadline time.Time) (*UDPReceiver, error) {
	fd, port, err := UDPSocketOn(ns, local)
	if err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, udpRcvBuf); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, udpRcvBuf)
	}
	r := &UDPReceiver{fd: fd, Port: port, flows: flows, deadline: deadline, done: make(chan error, 1)}
	go func() { r.done <- r.run() }()
	return r, nil
}

func (r *UDPReceiver) run() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bufs := make([][2048]byte, udpBatch)
	iovs := make([]unix.Iovec, udpBatch)
	msgs := make([]unix.Mmsghdr, udpBatch)
	for i := range msgs {
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(len(bufs[i]))
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	var maxSeq uint64
	last := make([]int64, r.flows) // per flow, the highest sequence number seen
	for i := range last {
		last[i] = -1
	}
	for calls := 0; !r.stop.Load() && calls < MaxPackets; calls++ {
		if calls%1024 == 0 && time.Now().After(r.deadline) {
			return nil
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&msgs[0])),
			udpBatch, unix.MSG_WAITFORONE, 0, 0)
		if errno != 0 {
			if errno == unix.EAGAIN || errno == unix.EINTR {
				continue
			}
			return fmt.Errorf("recvmmsg: %w", errno)
		}
		var b, ooo uint64
		for i := range int(n) {
			b += uint64(msgs[i].Len)
			if r.flows > 0 {
				if msgs[i].Len >= 8 {
					f, seq := binary.BigEndian.Uint32(bufs[i][:4]), int64(binary.BigEndian.Uint32(bufs[i][4:8]))
					if int(f) < len(last) {
						if seq < last[f] {
							ooo++
						} else {
							last[f] = seq
						}
					}
				}
			} else if msgs[i].Len >= 8 {
				seq := binary.BigEndian.Uint64(bufs[i][:8])
				if seq < maxSeq {
					ooo++
				} else {
					maxSeq = seq
				}
			}
		}
		r.Packets.Add(uint64(n))
		r.Bytes.Add(b)
		if ooo > 0 {
			r.OutOfOrder.Add(ooo)
		}
	}
	return nil
}

// Close stops the receiver and closes its socket.
func (r *UDPReceiver) Close() error {
	r.stop.Store(true)
	err := <-r.done // returns within sockTimeout
	unix.Close(r.fd)
	return err
}

// UDPSender sends size-byte IP packets to a destination, as fast as the
// socket takes them or paced at rate packets/s, until stopped, until its
// deadline or until it has sent maxPackets.
type UDPSender struct {
	fd     int
	size   int
	rate   float64 // 0: unpaced
	Sent   atomic.Uint64
	Errors atomic.Uint64
	stop   atomic.Bool
	done   chan error
}

// NewUDPSender starts a sender from an ephemeral port of local in ns to
// to; rate 0 sends as fast as the socket takes the datagrams.
func NewUDPSender(ns *topo.NS, local netip.Addr, to netip.AddrPort, size int, rate float64, deadline time.Time) (*UDPSender, error) {
	if size < UDPHeaders+8 || size > 65535 {
		return nil, fmt.Errorf("udp packet size %d out of range %d..65535", size, UDPHeaders+8)
	}
	fd, _, err := UDPSocket(ns, local)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, Sockaddr4(to)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("connect to %s: %w", to, err)
	}
	s := &UDPSender{fd: fd, size: size, rate: rate, done: make(chan error, 1)}
	go func() { s.done <- s.run(deadline) }()
	return s, nil
}

func (s *UDPSender) run(deadline time.Time) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	payload := s.size - UDPHeaders
	bufs := make([][]byte, udpBatch)
	iovs := make([]unix.Iovec, udpBatch)
	msgs := make([]unix.Mmsghdr, udpBatch)
	for i := range msgs {
		bufs[i] = make([]byte, payload)
		for j := 8; j < payload; j++ {
			bufs[i][j] = byte(j)
		}
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(payload)
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	start := time.Now()
	var seq uint64
	for !s.stop.Load() && seq < MaxPackets {
		now := time.Now()
		if !now.Before(deadline) {
			return nil
		}
		n := udpBatch
		if s.rate > 0 {
			due := int64(s.rate*now.Sub(start).Seconds()) - int64(seq)
			if due <= 0 {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			n = int(min(due, udpBatch))
		}
		for i := range n {
			binary.BigEndian.PutUint64(bufs[i], seq+uint64(i))
		}
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(n), 0, 0, 0)
		if errno != 0 {
			switch errno {
			case unix.EAGAIN, unix.ENOBUFS, unix.EINTR:
				// Back-pressure from a full device queue or socket
				// buffer: count it and try again.
				s.Errors.Add(1)
				runtime.Gosched()
				continue
			case unix.ECONNREFUSED:
				// An ICMP port unreachable from a receiver that just
				// closed; the next datagram goes out regardless.
				continue
			}
			return fmt.Errorf("sendmmsg: %w", errno)
		}
		seq += uint64(r)
		s.Sent.Store(seq)
	}
	return nil
}

// Close stops the sender and closes its socket.
func (s *UDPSender) Close() error {
	s.stop.Store(true)
	err := <-s.done
	unix.Close(s.fd)
	return err
}
