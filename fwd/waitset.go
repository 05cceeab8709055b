package fwd

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// waitSet is what a worker's sleep waits on in ppoll(2): its RX sockets,
// the TX sockets owed a kick, and its waker's eventfd.
//
// A poll(2) passes over each of its descriptors on every sleep: a
// wait-queue entry, an xsk_poll and, in copy mode, a transmit attempt per
// socket. At 63 pods, most of them quiet, that was half of what a
// packet's cost grew by from 2 pods. An epoll of every RX socket makes a
// sleep cost the same at any count, but its entry stays on each socket's
// wait queue while the worker is awake too: each RX flush of the kernel's
// on the sending CPU then calls the epoll's wake-up, which cost a
// cross-connect's flood 9 % of its packets/s (and each TX completion
// calls it too, on the forwarder's own CPU). So the set splits the
// sockets by traffic. A socket that received or sent within coolAfter is
// hot, polled directly: its wait-queue entry lives only while the worker
// sleeps. One quiet for longer is cold, held in an epoll that the sleep
// polls as one descriptor: its entry costs nothing while nothing passes.
// A cold socket's first packet ends the sleep through the epoll (level-
// triggered: a packet that came before the sleep ends it at once).
//
// The rounds follow the same split (rxSide.roundPorts): a cold port is
// read after every sleep and every coldEvery-th round, not in each of the
// empty rounds of a spin, and is warmed by the round that finds it
// holding packets.
//
// With fewer than coolMin RX sockets, or without an epoll (none could be
// made: out of descriptors or of epoll watches), every socket stays hot.
//
// Concurrency: the worker alone, or the caller while it is parked.
type waitSet struct {
	socks []waitSock
	// pfds are the sleep's ppoll arguments: the hot sockets (hot of
	// them, rebuilt when one cools or warms), the epoll while a socket
	// is cold, the cold sockets owed a kick or a fill ring's wake-up,
	// then the eventfd.
	pfds []unix.PollFd
	hot  int
	// ep is the epoll of the cold sockets (epoll: made; noEpoll: none
	// could be, until the set is rebuilt); cold counts them.
	ep             int
	epoll, noEpoll bool
	cold           int
	// sorted is when the sockets were last sorted into hot and cold
	// (monotonic ns).
	sorted int64
	// gen counts the moves, for the rounds' port list (rxSide.hot).
	gen uint64
	// moves counts the sockets moved each way, for the worker's stats.
	moves waitMoves
}

// waitMoves are a waitSet's counters: written by its worker, read by any
// goroutine. failed counts the sockets an epoll could not take (or let
// go of), each once until the set is rebuilt, and the epolls that could
// not be made; cold is how many sockets are cold now.
type waitMoves struct {
	coolings, warmings, failed atomic.Uint64
	cold                       atomic.Int64
}

// waitSock is one socket of the set: an RX port's, which its TX lane
// shares.
type waitSock struct {
	p  *port
	fd int32
	// cold: in the epoll; stuck: the epoll could not take it, and it
	// stays hot until the set is rebuilt.
	cold, stuck bool
	// heard is what its port had counted (RX batches and TX packets)
	// when last sorted, and quiet since when it counted no more
	// (monotonic ns).
	heard uint64
	quiet int64
}

const (
	// coolMin is the fewest RX sockets a worker splits into hot and
	// cold: below, a poll over each costs little.
	coolMin = 4
	// coolAfter is how long a socket passes nothing before it cools. A
	// socket that passes packets less often pays two epoll_ctl(2) calls
	// a packet at most: under 40 a second.
	coolAfter = int64(50 * time.Millisecond)
	// sortEvery is how often the set looks for sockets to move (at a
	// sleep); a round that finds packets on a cold port warms it at once
	// (warmPort).
	sortEvery = coolAfter / 2
)

// build makes the set of ports' sockets (a socket in memory has none:
// its producer wakes the worker), every one hot. It is rebuilt whole when
// a link comes or goes: rare, and a closed socket cannot linger in it.
func (s *waitSet) build(ports []*port, wake int) {
	s.close()
	s.socks = s.socks[:0]
	now := monoNow()
	for _, p := range ports {
		if fd := p.sock.FD(); fd >= 0 {
			s.add(p, int32(fd), now)
		}
	}
	s.rebuild(wake)
}

// add puts p's socket, fd, in the set, hot and heard at now.
func (s *waitSet) add(p *port, fd int32, now int64) {
	s.socks = append(s.socks, waitSock{p: p, fd: fd, heard: passed(p), quiet: now})
}

// passed is what p's socket has passed: RX batches, TX packets.
func passed(p *port) uint64 { return p.stats.load(cRXBatches) + p.stats.load(cTXPackets) }

// rebuild lays out pfds' hot prefix after a move.
func (s *waitSet) rebuild(wake int) {
	s.gen++
	s.pfds = s.pfds[:0]
	for _, c := range s.socks {
		if !c.cold {
			s.pfds = append(s.pfds, unix.PollFd{Fd: c.fd, Events: unix.POLLIN})
		}
	}
	s.hot = len(s.pfds)
	s.pfds = append(s.pfds, unix.PollFd{Fd: int32(wake), Events: unix.POLLIN})
}

// arm readies pfds for one sleep at now. Past them, with no event asked
// (an event of their own would end the sleep at once: a TX ring has
// room), the cold sockets the poll must wake: those whose TX ring is owed
// a kick (poll(2) on an AF_XDP socket transmits what it owes, or wakes a
// zero-copy driver) and, zero-copy, those whose fill ring asks for a
// wake-up. The hot ones are polled anyway.
func (s *waitSet) arm(now int64, wake int) {
	if len(s.socks) >= coolMin && now-s.sorted >= sortEvery {
		s.sort(now, wake)
	}
	s.pfds = s.pfds[:s.hot]
	if s.cold > 0 {
		s.pfds = append(s.pfds, unix.PollFd{Fd: int32(s.ep), Events: unix.POLLIN})
		for _, c := range s.socks {
			if c.cold && (c.p.tx != nil && c.p.tx.owed() || c.p.sock.ZeroCopy() && c.p.rx.FillWanted()) {
				s.pfds = append(s.pfds, unix.PollFd{Fd: c.fd})
			}
		}
	}
	s.pfds = append(s.pfds, unix.PollFd{Fd: int32(wake), Events: unix.POLLIN})
}

// woken reports whether the last sleep's poll found the eventfd written.
func (s *waitSet) woken() bool {
	return len(s.pfds) > 0 && s.pfds[len(s.pfds)-1].Revents != 0
}

// sort moves the sockets that passed packets since the last sort to the
// hot ones (a cold port a round found packets on is warmed at once:
// warmPort), and those quiet for coolAfter to the cold ones.
func (s *waitSet) sort(now int64, wake int) {
	s.sorted = now
	moved := false
	for i := range s.socks {
		c := &s.socks[i]
		heard := passed(c.p)
		switch {
		case heard != c.heard:
			c.heard, c.quiet = heard, now
			if c.cold {
				s.warm(c)
				moved = true
			}
		case !c.cold && !c.stuck && now-c.quiet >= coolAfter:
			moved = s.cool(c) || moved
		}
	}
	if moved {
		s.moves.cold.Store(int64(s.cold))
		s.rebuild(wake)
	}
}

// cool puts c in the epoll, made on first use; it stays hot if the
// epoll cannot take it (out of descriptors, or of epoll watches).
func (s *waitSet) cool(c *waitSock) bool {
	if s.noEpoll {
		return false
	}
	if !s.epoll {
		ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			s.noEpoll = true
			s.moves.failed.Add(1)
			return false
		}
		s.ep, s.epoll = ep, true
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: c.fd}
	if unix.EpollCtl(s.ep, unix.EPOLL_CTL_ADD, int(c.fd), &ev) != nil {
		c.stuck = true
		s.moves.failed.Add(1)
		return false
	}
	c.cold, c.p.cold = true, true
	s.cold++
	s.moves.coolings.Add(1)
	return true
}

// warm takes c out of the epoll. Should that fail, c is hot all the
// same: polled directly, and left in the epoll, which only costs its
// sender the epoll's wake-up.
func (s *waitSet) warm(c *waitSock) {
	if unix.EpollCtl(s.ep, unix.EPOLL_CTL_DEL, int(c.fd), nil) != nil {
		s.moves.failed.Add(1)
	}
	c.cold, c.p.cold = false, false
	s.cold--
	s.moves.warmings.Add(1)
}

// warmPort warms cold port p, which a round found holding packets, at
// now: its traffic should not wake the epoll from the sending CPU.
func (s *waitSet) warmPort(p *port, now int64, wake int) {
	for i := range s.socks {
		if c := &s.socks[i]; c.p == p && c.cold {
			s.warm(c)
			c.heard, c.quiet = passed(p), now
			s.moves.cold.Store(int64(s.cold))
			s.rebuild(wake)
			return
		}
	}
}

// close lets go of the epoll; every socket is hot again.
func (s *waitSet) close() error {
	for i := range s.socks {
		c := &s.socks[i]
		c.cold, c.stuck, c.p.cold = false, false, false
	}
	s.cold, s.noEpoll = 0, false
	s.moves.cold.Store(0)
	if !s.epoll {
		return nil
	}
	s.epoll = false
	return unix.Close(s.ep)
}
