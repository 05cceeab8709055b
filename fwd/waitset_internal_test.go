package fwd

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaitSetWakes: a sleep over 64 RX sockets polls two file
// descriptors (the epoll and the waker's eventfd), ends when any one
// socket becomes readable, before the sleep began as well as during it,
// and runs to its timeout once what was readable has been read: the
// epoll's ready list keeps nothing stale. Under epollMin sockets, the
// sleep polls each. Eventfds stand in for the
// sockets: the epoll sees only what the kernel reports of a file's
// readiness, as for an AF_XDP socket's RX ring.
func TestWaitSetWakes(t *testing.T) {
	newFD := func() int32 {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return int32(fd)
	}
	rx := make([]int32, 64)
	for i := range rx {
		rx[i] = newFD()
	}
	wake := newFD()
	var s waitSet
	s.build(rx)
	t.Cleanup(func() { s.close() })
	if !s.epoll {
		t.Fatal("no epoll")
	}
	sleep := func(timeout time.Duration) (ready int) {
		s.arm(nil, nil, int(wake))
		ts := unix.NsecToTimespec(int64(timeout))
		n, err := unix.Ppoll(s.pfds, &ts, nil)
		if err != nil {
			t.Fatalf("ppoll: %v", err)
		}
		return n
	}
	readable := func(fd int32) {
		if _, err := unix.Write(int(fd), wakeOne); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(fd int32) {
		var b [8]byte
		if _, err := unix.Read(int(fd), b[:]); err != nil {
			t.Fatal(err)
		}
	}

	if n := sleep(10 * time.Millisecond); n != 0 {
		t.Fatalf("nothing readable: %d ready", n)
	}
	if len(s.pfds) != 2 {
		t.Fatalf("a sleep over %d sockets polls %d fds, want 2 (the epoll, the eventfd)", len(rx), len(s.pfds))
	}
	for _, i := range []int{0, 31, 63} {
		readable(rx[i])
		if n := sleep(5 * time.Second); n != 1 || s.pfds[0].Revents&unix.POLLIN == 0 || s.woken() {
			t.Fatalf("socket %d readable before the sleep: %d ready, epoll %#x, woken %v", i, n, s.pfds[0].Revents, s.woken())
		}
		drain(rx[i])
		if n := sleep(10 * time.Millisecond); n != 0 {
			t.Fatalf("socket %d read: the next sleep found %d ready", i, n)
		}
		done := make(chan int)
		go func() { done <- sleep(5 * time.Second) }()
		time.Sleep(5 * time.Millisecond) // lands the write in the sleep, most times; before it is a case above
		readable(rx[i])
		if n := <-done; n != 1 {
			t.Fatalf("socket %d readable during the sleep: %d ready", i, n)
		}
		drain(rx[i])
	}
	readable(wake)
	if n := sleep(5 * time.Second); n != 1 || !s.woken() {
		t.Fatalf("the eventfd written: %d ready, woken %v", n, s.woken())
	}
	drain(wake)

	// Rebuilt (a link removed): a socket no longer in it wakes nothing.
	s.build(rx[1:])
	readable(rx[0])
	if n := sleep(10 * time.Millisecond); n != 0 {
		t.Fatalf("a socket left out of the rebuilt set: %d ready", n)
	}
	drain(rx[0])

	// Under epollMin sockets, no epoll: the sleep polls each.
	s.build(rx[:epollMin-1])
	if s.epoll {
		t.Fatalf("an epoll for %d sockets", epollMin-1)
	}
	readable(rx[3])
	if n := sleep(5 * time.Second); n != 1 || len(s.pfds) != epollMin || s.pfds[3].Revents&unix.POLLIN == 0 {
		t.Fatalf("%d sockets polled directly: %d ready, %d fds polled, socket 3's revents %#x", epollMin-1, n, len(s.pfds), s.pfds[3].Revents)
	}
}
