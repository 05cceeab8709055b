package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

const (
	udpBatch    = 64      // datagrams per sendmmsg/recvmmsg
	udpHeaders  = 20 + 8  // IPv4 + UDP: a workload's size is the IP packet length
	udpRcvBuf   = 4 << 20 // receiver socket buffer (SO_RCVBUFFORCE)
	maxPackets  = 1 << 31 // hard bound on any generator, whatever the duration
	maxWrites   = 1 << 24 // hard bound on the writes of one TCP stream or RR connection
	sockTimeout = 50 * time.Millisecond
)

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sockaddr4(a netip.AddrPort) *unix.SockaddrInet4 {
	return &unix.SockaddrInet4{Addr: a.Addr().As4(), Port: int(a.Port())}
}

// udpSocket opens a blocking IPv4 UDP socket in ns bound to local (port 0:
// ephemeral), with send and receive timeouts so no loop can hang on it.
func udpSocket(ns *topo.NS, local netip.Addr) (fd int, port int, err error) {
	err = ns.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err = unix.Bind(fd, sockaddr4(netip.AddrPortFrom(local, 0))); err != nil {
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

// udpReceiver counts datagrams on a socket until stopped, and those that
// arrive after a higher sequence number (out of order). Without flows the
// payload starts with one 64-bit sequence number; with flows > 0 it starts
// with a 32-bit flow id and a 32-bit sequence number of that flow, and
// order is counted per flow.
type udpReceiver struct {
	fd         int
	port       int
	flows      int
	packets    atomic.Uint64
	bytes      atomic.Uint64
	outOfOrder atomic.Uint64
	stop       atomic.Bool
	deadline   time.Time
	done       chan error
}

func newUDPReceiver(ns *topo.NS, local netip.Addr, deadline time.Time) (*udpReceiver, error) {
	return newSeqReceiver(ns, local, 0, deadline)
}

// newSeqReceiver is a receiver of flows sequenced flows (0: one, with a
// 64-bit sequence number).
func newSeqReceiver(ns *topo.NS, local netip.Addr, flows int, deadline time.Time) (*udpReceiver, error) {
	fd, port, err := udpSocket(ns, local)
	if err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, udpRcvBuf); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, udpRcvBuf)
	}
	r := &udpReceiver{fd: fd, port: port, flows: flows, deadline: deadline, done: make(chan error, 1)}
	go func() { r.done <- r.run() }()
	return r, nil
}

func (r *udpReceiver) run() error {
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
	for calls := 0; !r.stop.Load() && calls < maxPackets; calls++ {
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
		r.packets.Add(uint64(n))
		r.bytes.Add(b)
		if ooo > 0 {
			r.outOfOrder.Add(ooo)
		}
	}
	return nil
}

func (r *udpReceiver) close() error {
	r.stop.Store(true)
	err := <-r.done // returns within sockTimeout
	unix.Close(r.fd)
	return err
}

// udpSender sends size-byte IP packets to a destination, as fast as the
// socket takes them or paced at rate packets/s, until stopped, until its
// deadline or until it has sent maxPackets.
type udpSender struct {
	fd     int
	size   int
	rate   float64 // 0: unpaced
	sent   atomic.Uint64
	errors atomic.Uint64
	stop   atomic.Bool
	done   chan error
}

func newUDPSender(ns *topo.NS, local netip.Addr, to netip.AddrPort, size int, rate float64, deadline time.Time) (*udpSender, error) {
	if size < udpHeaders+8 || size > 65535 {
		return nil, fmt.Errorf("udp packet size %d out of range %d..65535", size, udpHeaders+8)
	}
	fd, _, err := udpSocket(ns, local)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, sockaddr4(to)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("connect to %s: %w", to, err)
	}
	s := &udpSender{fd: fd, size: size, rate: rate, done: make(chan error, 1)}
	go func() { s.done <- s.run(deadline) }()
	return s, nil
}

func (s *udpSender) run(deadline time.Time) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	payload := s.size - udpHeaders
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
	for !s.stop.Load() && seq < maxPackets {
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
				s.errors.Add(1)
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
		s.sent.Store(seq)
	}
	return nil
}

func (s *udpSender) close() error {
	s.stop.Store(true)
	err := <-s.done
	unix.Close(s.fd)
	return err
}

// tcpConns opens n connections from ns a to a listener in ns b and returns
// both ends of each. The sockets are made inside their namespaces and used
// from any goroutine afterwards.
func tcpConns(a, b *topo.NS, aAddr, bAddr netip.Addr, n int, timeout time.Duration) (client, server []*net.TCPConn, err error) {
	var ln *net.TCPListener
	if err := b.Do(func() error {
		var err error
		network := "tcp4"
		if bAddr.Is6() {
			network = "tcp6"
		}
		ln, err = net.ListenTCP(network, net.TCPAddrFromAddrPort(netip.AddrPortFrom(bAddr, 0)))
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("listen in %s: %w", b.Name, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(timeout)
	ln.SetDeadline(deadline)
	to := ln.Addr().(*net.TCPAddr)

	acc := make(chan error, 1)
	go func() {
		for range n {
			c, err := ln.AcceptTCP()
			if err != nil {
				acc <- err
				return
			}
			server = append(server, c)
		}
		acc <- nil
	}()
	derr := a.Do(func() error {
		d := net.Dialer{Deadline: deadline, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(aAddr, 0))}
		for range n {
			network := "tcp4"
			if aAddr.Is6() {
				network = "tcp6"
			}
			c, err := d.Dial(network, to.String())
			if err != nil {
				return err
			}
			client = append(client, c.(*net.TCPConn))
		}
		return nil
	})
	if derr != nil {
		ln.Close()
	}
	aerr := <-acc
	if err := errors.Join(derr, aerr); err != nil {
		closeAll(client)
		closeAll(server)
		return nil, nil, fmt.Errorf("open %d tcp connections %s -> %s: %w", n, a.Name, b.Name, err)
	}
	return client, server, nil
}

func closeAll(cs []*net.TCPConn) {
	for _, c := range cs {
		c.Close()
	}
}

// tcpBulk streams from every client to its server end until stopped and
// counts the bytes received.
type tcpBulk struct {
	client, server []*net.TCPConn
	received       atomic.Uint64
	stop           atomic.Bool
	wg             sync.WaitGroup
}

func startTCPBulk(client, server []*net.TCPConn, deadline time.Time) *tcpBulk {
	t := &tcpBulk{client: client, server: server}
	buf := make([]byte, 128<<10)
	for _, c := range client {
		c.SetDeadline(deadline)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			for i := 0; !t.stop.Load() && i < maxWrites; i++ {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	for _, c := range server {
		c.SetDeadline(deadline)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			rb := make([]byte, 256<<10)
			for i := 0; i < 4*maxWrites; i++ {
				n, err := c.Read(rb)
				t.received.Add(uint64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	return t
}

func (t *tcpBulk) close() {
	t.stop.Store(true)
	closeAll(t.client)
	closeAll(t.server)
	t.wg.Wait()
}

// rrLoad runs request/response transactions: each client sends a request
// of reqSize bytes and waits for a response of respSize bytes, back to back,
// on every connection. Transactions completed while measuring are counted
// and their latency recorded.
type rrLoad struct {
	client, server []*net.TCPConn
	measuring      atomic.Bool
	stop           atomic.Bool
	count          atomic.Uint64
	hist           *histogram
	wg             sync.WaitGroup
}

func startRR(client, server []*net.TCPConn, reqSize, respSize int, deadline time.Time) *rrLoad {
	r := &rrLoad{client: client, server: server, hist: &histogram{}}
	for _, c := range server {
		c.SetDeadline(deadline)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			req, resp := make([]byte, reqSize), make([]byte, respSize)
			for range maxWrites {
				if _, err := io.ReadFull(c, req); err != nil {
					return
				}
				if _, err := c.Write(resp); err != nil {
					return
				}
			}
		}()
	}
	for _, c := range client {
		c.SetDeadline(deadline)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			req, resp := make([]byte, reqSize), make([]byte, respSize)
			for i := 0; !r.stop.Load() && i < maxWrites; i++ {
				t0 := time.Now()
				if _, err := c.Write(req); err != nil {
					return
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					return
				}
				if r.measuring.Load() {
					r.hist.record(time.Since(t0))
					r.count.Add(1)
				}
			}
		}()
	}
	return r
}

func (r *rrLoad) close() {
	r.stop.Store(true)
	closeAll(r.client)
	closeAll(r.server)
	r.wg.Wait()
}

// histogram is a log-linear latency histogram: 32 buckets per power of two
// (about 3 % resolution), safe for concurrent use.
type histogram struct {
	b [2048]atomic.Uint64
}

const histSub = 32

func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(v) - 6 // v>>e is in [32, 63]
	return e*histSub + int(v>>e)
}

// histBounds is the range of values that fall into bucket i.
func histBounds(i int) (lo, hi uint64) {
	if i < 2*histSub {
		return uint64(i), uint64(i) + 1
	}
	e := i/histSub - 1
	sub := uint64(i%histSub + histSub)
	return sub << e, (sub + 1) << e
}

func (h *histogram) record(d time.Duration) {
	h.b[histIndex(uint64(max(d, 0)))].Add(1)
}

// quantile returns the q-quantile (0..1) in ns, the middle of its bucket.
func (h *histogram) quantile(q float64) float64 {
	var total uint64
	for i := range h.b {
		total += h.b[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var cum uint64
	for i := range h.b {
		cum += h.b[i].Load()
		if cum >= rank {
			lo, hi := histBounds(i)
			return float64(lo+hi) / 2
		}
	}
	return 0
}
