package fwd

import (
	"slices"

	"golang.org/x/sys/unix"
)

// waitSet is what a worker's sleep waits on. A worker with epollMin RX
// sockets or more waits on one epoll instance that holds them, so that
// the sleep's poll(2) passes over a few file descriptors (the epoll, the
// sockets owed a kick or a fill ring's wake-up, the waker's eventfd)
// however many links it serves: a poll(2) over every RX socket cost each
// sleep a wait-queue entry, an xsk_poll and a transmit attempt per
// socket, at 63 pods half of what the forwarder's cost per packet grew by
// from 2 pods. A worker with fewer polls its RX sockets directly: an
// epoll's entry stays on each socket's wait queue while the worker is
// awake too, so every flush of the socket's RX ring by the kernel (on the
// sending CPU) calls the epoll's wake-up, which cost a cross-connect's
// flood 9 % of its packets/s on this machine's veths.
//
// The epoll is level-triggered and never waited on with epoll_wait: a
// socket's data_ready puts it on the epoll's ready list, and poll(2) on
// the epoll re-polls only what that list holds (and drops what is no
// longer ready), so a packet that comes between the worker's last look
// and its sleep ends the sleep, as with the sockets polled directly.
//
// Concurrency: the worker alone.
type waitSet struct {
	// ep is the epoll instance, if epoll: without one, pfds lists every
	// RX socket (the zero value: no epoll).
	ep    int
	epoll bool
	// rx are the RX sockets' fds, for build's epoll, or for pfds
	// without one.
	rx []int32
	// pfds are arm's ppoll arguments: the epoll or every RX socket,
	// the sockets to wake, then the waker's eventfd.
	pfds []unix.PollFd
}

// epollMin is the fewest RX sockets a worker waits on through an epoll.
const epollMin = 16

// build makes the wait set of the RX sockets rx (their fds; a socket in
// memory has none, and the waker rouses the worker for it): an epoll that
// holds them, from epollMin. It is rebuilt whole when a link comes or
// goes: rare, and a closed socket then cannot linger in it. Without an
// epoll (fewer sockets, or its creation failed: out of file descriptors
// or of epoll watches) the sleep polls every RX socket itself.
func (s *waitSet) build(rx []int32) {
	s.close()
	s.rx = append(s.rx[:0], rx...)
	if len(s.rx) < epollMin {
		return
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return
	}
	for _, fd := range s.rx {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: fd}
		if unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, int(fd), &ev) != nil {
			unix.Close(ep)
			return
		}
	}
	s.ep, s.epoll = ep, true
}

// arm readies pfds for one sleep: the epoll (or the RX sockets), then,
// with no events asked of them (an event of their own would end the
// sleep at once: a TX ring has room), every socket the poll must wake:
// each lane owed a kick (poll(2) on an AF_XDP socket transmits what its
// TX ring owes, or wakes a zero-copy driver) and each RX socket whose
// fill ring asks for a wake-up (a zero-copy driver that ran dry, which
// the poll of every RX socket woke before the epoll); then the eventfd,
// last.
func (s *waitSet) arm(ports []*port, lanes []*lane, wake int) {
	s.pfds = s.pfds[:0]
	if s.epoll {
		s.pfds = append(s.pfds, unix.PollFd{Fd: int32(s.ep), Events: unix.POLLIN})
	} else {
		for _, fd := range s.rx {
			s.pfds = append(s.pfds, unix.PollFd{Fd: fd, Events: unix.POLLIN})
		}
	}
	for _, l := range lanes {
		if l.owed() && l.fd >= 0 && !s.polls(l.fd) {
			s.pfds = append(s.pfds, unix.PollFd{Fd: l.fd})
		}
	}
	for _, p := range ports {
		if fd := int32(p.sock.FD()); fd >= 0 && !s.polls(fd) && p.rx.FillWanted() {
			s.pfds = append(s.pfds, unix.PollFd{Fd: fd})
		}
	}
	s.pfds = append(s.pfds, unix.PollFd{Fd: int32(wake), Events: unix.POLLIN})
}

// polls reports whether the sleep polls fd as an RX socket already.
func (s *waitSet) polls(fd int32) bool { return !s.epoll && slices.Contains(s.rx, fd) }

// woken reports whether the last sleep's poll found the eventfd written.
func (s *waitSet) woken() bool {
	return len(s.pfds) > 0 && s.pfds[len(s.pfds)-1].Revents != 0
}

func (s *waitSet) close() error {
	if !s.epoll {
		return nil
	}
	s.epoll = false
	return unix.Close(s.ep)
}
