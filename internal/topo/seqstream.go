package topo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A SeqStream is one UDP flow at a steady rate from one namespace to
// another, each datagram carrying its 64-bit sequence number and when it
// was sent: the sender writes what is due every tick in sendmmsg batches,
// the receiver reads with recvmmsg and records what arrived, in what
// order, every silence between two arrivals longer than a floor, and
// every datagram that took longer than the floor to arrive. Arrivals are
// the kernel's receive stamps (SO_TIMESTAMPNS), not when the receiving
// thread got to them: a receiver descheduled on a busy machine does not
// pass for a datapath that stalled. It measures what a datapath loses,
// reorders and holds while something happens to it (a handover, a
// restart).
type SeqStream struct {
	sfd, rfd int
	pps      int
	size     int
	start    time.Time

	sent atomic.Uint64
	stop atomic.Bool
	// The receiver's, read once it has stopped.
	seen                []uint64 // a bit per sequence number
	received, reordered uint64
	dups, beyond        uint64
	maxSeq              int64
	gaps                []Gap
	delays              []Gap // datagrams that took longer than floor: when they arrived, and how long
	maxDelay            time.Duration
	floor               time.Duration
	last                time.Time
	sendDone, recvDone  chan error
	recvStop            atomic.Bool
	mu                  sync.Mutex // guards gaps, last for Gaps while running

	stopOnce sync.Once
	result   SeqResult
	err      error
}

// Gap is a silence at the receiver: no datagram from At for Len.
type Gap struct {
	At  time.Time
	Len time.Duration
}

// SeqResult is what a SeqStream saw.
type SeqResult struct {
	Sent, Received uint64
	// Lost are the sequence numbers sent and never received; Reordered
	// the datagrams that arrived after a higher one; Duplicates those
	// received twice.
	Lost, Reordered, Duplicates uint64
	// Gaps are the silences longer than the floor, in order; MaxGap the
	// longest silence of all.
	Gaps   []Gap
	MaxGap time.Duration
	// Delays are the datagrams that took longer than the floor from
	// the sender's write to the receiving kernel (At their arrival, Len
	// the time they took); MaxDelay the longest of all.
	Delays   []Gap
	MaxDelay time.Duration
}

const (
	seqBatch   = 64
	seqMaxSent = 1 << 26 // a bound on any stream: 64 Mi datagrams
)

// StartSeqStream starts a stream of pps datagrams/s, each of size bytes
// of UDP payload (at least 8), from src (address from) to dst (address
// to); silences longer than floor are recorded. It runs until Stop, or
// until it has sent seqMaxSent.
func StartSeqStream(src, dst *NS, from, to netip.Addr, pps, size int, floor time.Duration) (*SeqStream, error) {
	if pps <= 0 || size < 16 || size > 1400 {
		return nil, fmt.Errorf("seq stream: %d pps of %d bytes: want a rate and 16..1400 bytes", pps, size)
	}
	rfd, port, err := udpSocket(dst, to)
	if err != nil {
		return nil, err
	}
	unix.SetsockoptInt(rfd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
	if err := unix.SetsockoptInt(rfd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		unix.Close(rfd)
		return nil, fmt.Errorf("seq stream: SO_TIMESTAMPNS: %w", err)
	}
	sfd, _, err := udpSocket(src, from)
	if err != nil {
		unix.Close(rfd)
		return nil, err
	}
	if err := unix.Connect(sfd, &unix.SockaddrInet4{Addr: to.As4(), Port: port}); err != nil {
		unix.Close(rfd)
		unix.Close(sfd)
		return nil, fmt.Errorf("seq stream: connect to %s:%d: %w", to, port, err)
	}
	s := &SeqStream{sfd: sfd, rfd: rfd, pps: pps, size: size, floor: floor, maxSeq: -1,
		seen: make([]uint64, seqMaxSent/64), sendDone: make(chan error, 1), recvDone: make(chan error, 1)}
	s.start = time.Now()
	go func() { s.recvDone <- s.receive() }()
	go func() { s.sendDone <- s.send() }()
	return s, nil
}

// udpSocket is a blocking IPv4 UDP socket in ns bound to an ephemeral
// port of local, with timeouts so that no loop hangs on it.
func udpSocket(ns *NS, local netip.Addr) (fd, port int, err error) {
	err = ns.Do(func() error {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err = unix.Bind(fd, &unix.SockaddrInet4{Addr: local.As4()}); err != nil {
			unix.Close(fd)
			return err
		}
		tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
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

// mmsgs are n message headers over n buffers of size bytes.
func mmsgs(n, size int) ([][]byte, []unix.Mmsghdr) {
	bufs := make([][]byte, n)
	iovs := make([]unix.Iovec, n)
	msgs := make([]unix.Mmsghdr, n)
	for i := range msgs {
		bufs[i] = make([]byte, size)
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(size)
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	return bufs, msgs
}

// send writes what is due at the rate, a tick of 200 µs at a time.
func (s *SeqStream) send() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bufs, msgs := mmsgs(seqBatch, s.size)
	var seq uint64
	for !s.stop.Load() && seq < seqMaxSent {
		due := uint64(float64(s.pps)*time.Since(s.start).Seconds()) - seq
		if int64(due) <= 0 {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		n := min(int(due), seqBatch, int(seqMaxSent-seq))
		now := uint64(time.Now().UnixNano())
		for i := range n {
			binary.BigEndian.PutUint64(bufs[i], seq+uint64(i))
			binary.BigEndian.PutUint64(bufs[i][8:], now)
		}
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.sfd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(n), 0, 0, 0)
		switch {
		case errno == unix.EAGAIN || errno == unix.ENOBUFS || errno == unix.EINTR:
			continue // the device's queue is full for now: the rest is due still
		case errno != 0:
			return fmt.Errorf("seq stream: sendmmsg: %w", errno)
		}
		seq += uint64(r)
		s.sent.Store(seq)
	}
	return nil
}

// receive reads until told to stop, recording each datagram.
func (s *SeqStream) receive() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bufs, msgs := mmsgs(seqBatch, 2048)
	oobLen := unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{})))
	oob := make([]byte, seqBatch*oobLen)
	for i := range msgs {
		msgs[i].Hdr.Control = &oob[i*oobLen]
	}
	for !s.recvStop.Load() {
		for i := range msgs {
			msgs[i].Hdr.SetControllen(oobLen)
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.rfd), uintptr(unsafe.Pointer(&msgs[0])), seqBatch, unix.MSG_WAITFORONE, 0, 0)
		if errno == unix.EAGAIN || errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("seq stream: recvmmsg: %w", errno)
		}
		for i := range int(n) {
			at := arrival(oob[i*oobLen : i*oobLen+int(msgs[i].Hdr.Controllen)])
			if msgs[i].Len < 16 {
				continue
			}
			s.arrived(at, binary.BigEndian.Uint64(bufs[i]), int64(binary.BigEndian.Uint64(bufs[i][8:])))
		}
	}
	return nil
}

// arrival is the kernel's receive stamp in a message's control data, or
// now if it has none.
func arrival(oob []byte) time.Time {
	if msgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
				ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				return time.Unix(ts.Unix())
			}
		}
	}
	return time.Now()
}

// arrived records datagram seq, sent at sent (Unix ns), arriving at at.
func (s *SeqStream) arrived(at time.Time, seq uint64, sent int64) {
	s.mu.Lock()
	if !s.last.IsZero() {
		if gap := at.Sub(s.last); gap > s.floor {
			s.gaps = append(s.gaps, Gap{At: s.last, Len: gap})
		}
	}
	if at.After(s.last) {
		s.last = at
	}
	s.mu.Unlock()
	if d := at.Sub(time.Unix(0, sent)); d > s.floor {
		s.delays = append(s.delays, Gap{At: at, Len: d})
		s.maxDelay = max(s.maxDelay, d)
	}
	if seq >= seqMaxSent {
		s.beyond++
		return
	}
	w, bit := seq/64, uint64(1)<<(seq%64)
	if s.seen[w]&bit != 0 {
		s.dups++
		return
	}
	s.seen[w] |= bit
	s.received++
	if int64(seq) < s.maxSeq {
		s.reordered++
	} else {
		s.maxSeq = int64(seq)
	}
}

// Sent is how many datagrams the sender wrote so far.
func (s *SeqStream) Sent() uint64 { return s.sent.Load() }

// Gaps are the silences recorded so far.
func (s *SeqStream) Gaps() []Gap {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Gap(nil), s.gaps...)
}

// Stop stops the sender, lets the receiver take what is still on its
// way (until quiet passes without a datagram, at most a second), and
// returns what the stream saw. Stopping again returns the same (a test
// may defer Stop for its failures).
func (s *SeqStream) Stop(quiet time.Duration) (SeqResult, error) {
	s.stopOnce.Do(func() { s.result, s.err = s.stopNow(quiet) })
	return s.result, s.err
}

func (s *SeqStream) stopNow(quiet time.Duration) (SeqResult, error) {
	s.stop.Store(true)
	serr := <-s.sendDone
	deadline := time.Now().Add(time.Second)
	for {
		s.mu.Lock()
		last := s.last
		s.mu.Unlock()
		if time.Since(last) > quiet || time.Now().After(deadline) {
			break
		}
		time.Sleep(quiet / 4)
	}
	s.recvStop.Store(true)
	rerr := <-s.recvDone
	unix.Close(s.sfd)
	unix.Close(s.rfd)
	r := SeqResult{Sent: s.sent.Load(), Received: s.received, Reordered: s.reordered, Duplicates: s.dups, Gaps: s.gaps,
		Delays: s.delays, MaxDelay: s.maxDelay}
	r.Lost = r.Sent - min(r.Sent, s.received)
	for _, g := range s.gaps {
		r.MaxGap = max(r.MaxGap, g.Len)
	}
	if s.beyond > 0 {
		rerr = errors.Join(rerr, fmt.Errorf("seq stream: %d datagrams beyond the sequence bound", s.beyond))
	}
	return r, errors.Join(serr, rerr)
}
