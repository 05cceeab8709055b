package topo

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A SeqStream is one UDP flow at a steady rate from one namespace to
// another, each datagram carrying its 64-bit sequence number and when it
// was sent: the sender writes what is due every tick in sendmmsg batches
// (a sender that fell behind catches up by 2 ms' worth at most, never
// bursting what it owes),
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

	sent atomic.Uint64
	stop atomic.Bool
	// The sender's: when each sendmmsg batch began (its first sequence
	// number and the time), so that a loss can be placed in time.
	batches  []sentBatch
	forgiven uint64 // what fell due while the sender was behind, not written
	// The receiver's, read once it has stopped.
	seen                []uint64 // a bit per sequence number
	received, reordered uint64
	dups, beyond        uint64
	maxSeq              int64
	gaps                []Gap
	delays              []Gap // datagrams that took longer than floor: when they arrived, and how long
	maxDelay            time.Duration
	reorders            []Reorder // the first seqMaxReorders
	floor               time.Duration
	last                time.Time
	sendDone, recvDone  chan error
	recvStop            atomic.Bool
	mu                  sync.Mutex // guards gaps, last for Gaps while running

	stopOnce sync.Once
	result   SeqResult
	err      error
}

type sentBatch struct {
	first uint64
	at    time.Time
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
	// Reorders are the first datagrams (up to 64) that arrived after a
	// higher one: where and when, so that a reorder can be placed.
	Reorders []Reorder
	// LostRuns are the losses as runs of consecutive sequence numbers,
	// each with when its first was written.
	LostRuns []LostRun
	// Forgiven is what fell due while the sender was behind (its thread
	// descheduled) by more than it catches up: never written, so never
	// lost either.
	Forgiven uint64
}

// Reorder is datagram Seq arriving At, Behind the highest before it.
type Reorder struct {
	Seq, Behind uint64
	At          time.Time
}

// LostRun is Count consecutive datagrams lost, the first written at At.
type LostRun struct {
	First, Count uint64
	At           time.Time
}

const (
	seqBatch = 64
	// seqOpen numbers the datagrams that open a stream's path
	// (openPath): beyond any stream's, and not counted.
	seqOpen        = 1<<64 - 1
	seqOpenTimeout = 5 * time.Second
	// seqMaxReorders is how many reorders a stream records one by one.
	seqMaxReorders = 64
	seqMaxSent     = 1 << 26 // a bound on any stream: 64 Mi datagrams
	// seqCatchUp is how far behind its rate a sender writes to catch up.
	seqCatchUp = 2 * time.Millisecond
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
	if err := openPath(sfd, rfd, size, seqOpenTimeout); err != nil {
		unix.Close(rfd)
		unix.Close(sfd)
		return nil, fmt.Errorf("seq stream %s → %s: %w", from, to, err)
	}
	s := &SeqStream{sfd: sfd, rfd: rfd, pps: pps, size: size, floor: floor, maxSeq: -1,
		seen: make([]uint64, seqMaxSent/64), sendDone: make(chan error, 1), recvDone: make(chan error, 1)}
	go func() { s.recvDone <- s.receive() }()
	go func() { s.sendDone <- s.send() }()
	return s, nil
}

// openPath sends datagrams numbered seqOpen on sfd, one every 10 ms,
// until one arrives on rfd, or for timeout. A stream starts on an open
// path: while the sender's kernel resolves the receiver's address, it
// queues what the sender writes and, once resolved, sends the queue
// while the sender's newer datagrams overtake it; a stream that began
// there would count the kernel's neighbour resolution as reordering.
func openPath(sfd, rfd, size int, timeout time.Duration) error {
	out, in := make([]byte, size), make([]byte, 2048)
	binary.BigEndian.PutUint64(out, seqOpen)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		if _, err := unix.Write(sfd, out); err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ECONNREFUSED) {
			return fmt.Errorf("opening the path: %w", err)
		}
		for next := time.Now().Add(10 * time.Millisecond); time.Now().Before(next); {
			n, err := unix.Read(rfd, in) // SO_RCVTIMEO bounds it
			if err == nil && n >= 8 && binary.BigEndian.Uint64(in) == seqOpen {
				return nil
			}
		}
	}
	return fmt.Errorf("no datagram crossed in %v", timeout)
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
	// The rate counts from the sender's first moment on its thread, and
	// a sender that fell behind (its thread descheduled on a busy
	// machine) forgives what fell due beyond seqCatchUp instead of
	// writing it at once: the stream never runs ahead of its rate by
	// more than that, never a burst at the speed of sendmmsg that would
	// measure the kernel's queues (a veth's 256 entries), not the
	// datapath under test.
	start := time.Now()
	for !s.stop.Load() && seq < seqMaxSent {
		elapsed := time.Since(start)
		due := int64(float64(s.pps)*elapsed.Seconds()) - int64(seq)
		if due <= 0 {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		if limit := int64(float64(s.pps) * seqCatchUp.Seconds()); due > limit {
			start = start.Add(time.Duration(float64(due-limit) / float64(s.pps) * float64(time.Second)))
			s.forgiven += uint64(due - limit)
			due = limit
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
		s.batches = append(s.batches, sentBatch{seq, time.Unix(0, int64(now))})
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
	if seq == seqOpen {
		return // a late one of openPath's
	}
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
		if len(s.reorders) < seqMaxReorders {
			s.reorders = append(s.reorders, Reorder{Seq: seq, Behind: uint64(s.maxSeq) - seq, At: at})
		}
	} else {
		s.maxSeq = int64(seq)
	}
}

// lostRuns finds the sequence numbers below sent never seen, once both
// the sender and the receiver have stopped.
func (s *SeqStream) lostRuns(sent uint64) []LostRun {
	var runs []LostRun
	for seq := uint64(0); seq < sent; seq++ {
		if s.seen[seq/64]&(1<<(seq%64)) != 0 {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].First+runs[n-1].Count == seq {
			runs[n-1].Count++
			continue
		}
		i, _ := slices.BinarySearchFunc(s.batches, seq, func(b sentBatch, seq uint64) int { return cmp.Compare(b.first, seq) })
		if i == len(s.batches) || s.batches[i].first > seq {
			i-- // the batch that began before seq
		}
		runs = append(runs, LostRun{First: seq, Count: 1, At: s.batches[max(i, 0)].at})
	}
	return runs
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
		Delays: s.delays, MaxDelay: s.maxDelay, Reorders: s.reorders}
	r.Lost = r.Sent - min(r.Sent, s.received)
	r.LostRuns = s.lostRuns(r.Sent)
	r.Forgiven = s.forgiven
	for _, g := range s.gaps {
		r.MaxGap = max(r.MaxGap, g.Len)
	}
	if s.beyond > 0 {
		rerr = errors.Join(rerr, fmt.Errorf("seq stream: %d datagrams beyond the sequence bound", s.beyond))
	}
	return r, errors.Join(serr, rerr)
}
