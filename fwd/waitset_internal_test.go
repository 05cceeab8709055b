package fwd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

// TestWaitSetCools: of 64 RX sockets, those quiet for coolAfter leave
// the sleep's poll for the epoll, which the sleep polls as one
// descriptor; a cold socket readable before the sleep or during it ends
// the sleep, and is polled directly again from the next; a socket whose
// TX ring is owed a kick is polled (to kick it) while cold; a socket
// that keeps receiving, or sending, stays hot; and nothing stale wakes a
// sleep. Eventfds
// stand in for the sockets: poll(2) and the epoll see only what the
// kernel reports of a file's readiness, as of an AF_XDP socket's RX ring.
func TestWaitSetCools(t *testing.T) {
	newFD := func() int32 {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return int32(fd)
	}
	const n = 64
	var s waitSet
	t.Cleanup(func() { s.close() })
	ports, fds := make([]*port, n), make([]int32, n)
	now := int64(time.Hour)
	for i := range ports {
		ports[i] = &port{link: i, sock: xsktest.New(64, 0, 0).Socket}
		ports[i].tx = newLane(ports[i])
		fds[i] = newFD()
		s.add(ports[i], fds[i], now)
	}
	wake := newFD()
	s.rebuild(int(wake))
	// received is what a round counts of a batch from port i, sent of a
	// packet to it.
	received := func(i int) { ports[i].stats.n[cRXBatches].Add(1) }
	sent := func(i int) { ports[i].stats.n[cTXPackets].Add(1) }
	sleep := func(timeout time.Duration) (ready int) {
		s.arm(now, int(wake))
		ts := unix.NsecToTimespec(int64(timeout))
		k, err := unix.Ppoll(s.pfds, &ts, nil)
		if err != nil {
			t.Fatalf("ppoll: %v", err)
		}
		return k
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
	polled := func() (hot []int32, epoll bool) {
		for _, p := range s.pfds[:len(s.pfds)-1] {
			if p.Fd == int32(s.ep) && s.epoll {
				epoll = true
			} else {
				hot = append(hot, p.Fd)
			}
		}
		return hot, epoll
	}

	if k := sleep(time.Millisecond); k != 0 || len(s.pfds) != n+1 {
		t.Fatalf("all hot: %d ready, %d fds polled, want 0 and %d", k, len(s.pfds), n+1)
	}
	// Socket 7 keeps receiving, 8 sending; the rest fall quiet.
	for range 3 {
		now += sortEvery
		received(7)
		sent(8)
		sleep(time.Millisecond)
	}
	if hot, epoll := polled(); len(hot) != 2 || hot[0] != fds[7] || hot[1] != fds[8] || !epoll || s.cold != n-2 {
		t.Fatalf("after %v quiet: polls %v and the epoll %v, %d cold; want sockets 7's and 8's fds %d %d, the epoll, %d cold",
			time.Duration(3*sortEvery), hot, epoll, s.cold, fds[7], fds[8], n-2)
	}
	if got := s.moves.coolings.Load(); got != n-2 {
		t.Fatalf("coolings %d, want %d", got, n-2)
	}

	// A cold socket readable before the sleep ends it, and is hot again
	// once a round found its packet.
	readable(fds[40])
	if k := sleep(5 * time.Second); k != 1 || s.woken() {
		t.Fatalf("cold socket 40 readable before the sleep: %d ready, woken %v", k, s.woken())
	}
	drain(fds[40])
	received(40)
	gen := s.gen
	s.warmPort(ports[40], now, int(wake))
	if s.socks[40].cold || ports[40].cold || s.cold != n-3 || s.moves.warmings.Load() != 1 || s.gen == gen {
		t.Fatalf("socket 40 woke the sleep: cold %v (port %v), %d cold, %d warmings, gen %d -> %d; want hot, %d, 1, a new gen",
			s.socks[40].cold, ports[40].cold, s.cold, s.moves.warmings.Load(), gen, s.gen, n-3)
	}
	for i, p := range ports {
		if p.cold != s.socks[i].cold {
			t.Fatalf("port %d cold %v, its socket %v", i, p.cold, s.socks[i].cold)
		}
	}
	if k := sleep(10 * time.Millisecond); k != 0 {
		t.Fatalf("socket 40 read: the next sleep found %d ready", k)
	}
	if hot, _ := polled(); len(hot) != 3 {
		t.Fatalf("hot sockets %v, want 7's, 8's and 40's", hot)
	}

	// One readable during the sleep ends it too.
	done := make(chan int)
	go func() { done <- sleep(5 * time.Second) }()
	time.Sleep(5 * time.Millisecond) // lands the write in the sleep, most times; before it is the case above
	readable(fds[63])
	if k := <-done; k != 1 {
		t.Fatalf("cold socket 63 readable during the sleep: %d ready", k)
	}
	drain(fds[63])

	// A cold socket owed a TX kick is polled, with no event asked.
	l := ports[20].tx
	l.reserve(1)
	if !l.put([]xsk.Desc{{Addr: 0, Len: 60}}) {
		t.Fatal("put")
	}
	l.publish()
	if !l.owed() || !s.socks[20].cold {
		t.Fatalf("socket 20: owed %v, cold %v", l.owed(), s.socks[20].cold)
	}
	s.arm(now, int(wake))
	if i := len(s.pfds) - 2; s.pfds[i].Fd != fds[20] || s.pfds[i].Events != 0 {
		t.Fatalf("cold socket 20 owed a kick: polled %+v, want fd %d with no event", s.pfds, fds[20])
	}

	// The eventfd.
	readable(wake)
	if k := sleep(5 * time.Second); k != 1 || !s.woken() {
		t.Fatalf("the eventfd written: %d ready, woken %v", k, s.woken())
	}
	drain(wake)

	// Rebuilt (a link removed): every socket hot, and one no longer in
	// the set wakes nothing.
	s.close()
	s.socks = s.socks[:0]
	for i := 1; i < n; i++ {
		s.add(ports[i], fds[i], now)
	}
	s.rebuild(int(wake))
	readable(fds[0])
	if k := sleep(10 * time.Millisecond); k != 0 || len(s.pfds) != n {
		t.Fatalf("rebuilt without socket 0: %d ready, %d fds polled; want 0, %d", k, len(s.pfds), n)
	}
}

// TestWaitSetStuck: a socket the epoll cannot take stays hot, polled
// directly, and is counted once, not at every sort; the others cool. A
// regular file stands in for it: epoll refuses those (EPERM).
func TestWaitSetStuck(t *testing.T) {
	var s waitSet
	t.Cleanup(func() { s.close() })
	now := int64(time.Hour)
	var fds []int32
	for i := range coolMin {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if i == 0 {
			f, ferr := os.Create(filepath.Join(t.TempDir(), "file"))
			if ferr != nil {
				t.Fatal(ferr)
			}
			t.Cleanup(func() { f.Close() })
			fd, err = int(f.Fd()), nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			t.Cleanup(func() { unix.Close(fd) })
		}
		fds = append(fds, int32(fd))
		s.add(&port{link: i, sock: xsktest.New(64, 0, 0).Socket}, int32(fd), now)
	}
	s.rebuild(-1)
	for range 5 {
		now += sortEvery
		s.arm(now, -1)
	}
	if s.cold != coolMin-1 || s.socks[0].cold || !s.socks[0].stuck || s.moves.failed.Load() != 1 {
		t.Fatalf("%d cold, the file's socket cold %v stuck %v, %d failures; want %d, false, true, 1", s.cold, s.socks[0].cold, s.socks[0].stuck, s.moves.failed.Load(), coolMin-1)
	}
	if s.pfds[0].Fd != fds[0] || s.pfds[0].Events != unix.POLLIN {
		t.Fatalf("the stuck socket is not polled directly: %+v", s.pfds)
	}
}

// TestRoundPorts: a round reads the hot ports, and every port in the
// round after a sleep, every coldEvery-th round, and every round with
// ordering; a move (a new gen) rebuilds the hot list.
func TestRoundPorts(t *testing.T) {
	ports := make([]*port, 6)
	for i := range ports {
		ports[i] = &port{link: i, cold: i >= 2}
	}
	r := rxSide{ports: ports}
	links := func(ps []*port) (l []int) {
		for _, p := range ps {
			l = append(l, p.link)
		}
		return l
	}
	hot, all := []int{0, 1}, []int{0, 1, 2, 3, 4, 5}
	var got [][]int
	for range 2 * coldEvery {
		got = append(got, links(r.roundPorts(1, false)))
	}
	for i, g := range got {
		want := hot
		if (i+1)%coldEvery == 0 {
			want = all
		}
		if !slices.Equal(g, want) {
			t.Fatalf("round %d: reads %v, want %v", i+1, g, want)
		}
	}
	r.allNext()
	if g := links(r.roundPorts(1, false)); !slices.Equal(g, all) {
		t.Fatalf("after a sleep: reads %v, want %v", g, all)
	}
	if g := links(r.roundPorts(1, true)); !slices.Equal(g, all) {
		t.Fatalf("ordered: reads %v, want %v", g, all)
	}
	ports[3].cold = false // warmed: a new gen
	if g := links(r.roundPorts(2, false)); !slices.Equal(g, []int{0, 1, 3}) {
		t.Fatalf("port 3 warmed: reads %v, want [0 1 3]", g)
	}
}
