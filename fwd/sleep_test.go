package fwd_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestIdleSettingsForward: every way a worker can spend its idle time —
// the default adaptive spin, a fixed 64 rounds, a 25 µs and a 1 ms
// coalescing window, no spinning at all, busy polling, never sleeping —
// forwards a trickle both ways (the worker sleeps between frames, or with
// --spin busy polls through) and a burst with nothing lost in user space.
// On the fake environment: no root.
func TestIdleSettingsForward(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  fwd.Config
	}{
		{"defaults", fwd.Config{}},
		{"64 rounds", fwd.Config{Spin: 64}},
		{"25us coalescing", fwd.Config{Coalesce: 25 * time.Microsecond}},
		{"1ms coalescing", fwd.Config{Coalesce: time.Millisecond}},
		{"no spinning", fwd.Config{Spin: -1}},
		{"busy polling", fwd.Config{BusyPoll: 20 * time.Microsecond}},
		{"never sleeping", fwd.Config{Spin: fwd.SpinBusy}},
	} {
		busy := c.cfg.Spin == fwd.SpinBusy
		t.Run(c.name, func(t *testing.T) {
			r := startFake(t, c.cfg, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
			for dir := range 2 {
				for i := range 3 {
					f := seqFrame(macB, macA, 1, uint32(i), 98)
					r.inject(dir, 0, f, fwdtest.RX{})
					if got := r.links[1-dir].CollectN(1, 3*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, f) {
						t.Fatalf("trickle %d → %d, frame %d: %d out, want it", dir, 1-dir, i, len(got))
					}
					rounds := r.f.WorkerStats()[0].Rounds
					soon(t, "the worker idle", func() bool {
						w := r.f.WorkerStats()[0]
						if busy {
							return w.Rounds > rounds+1000 // polling
						}
						return w.Sleeps > w.Polls // in ppoll(2)
					})
				}
			}
			const n = 5000
			got := 0
			for i := range n {
				r.inject(0, 0, seqFrame(macB, macA, 2, uint32(i), 64), fwdtest.RX{})
				if i%64 == 0 {
					got += len(r.links[1].Collect())
				}
			}
			got += len(r.links[1].CollectN(n-got, 5*time.Second))
			if got != n {
				t.Fatalf("burst: %d of %d frames out", got, n)
			}
			soon(t, "counters", func() bool { return r.f.LinkStats(1).TXPackets == n+3 })
			a, b := r.f.LinkStats(0), r.f.LinkStats(1)
			if a.RXPackets != n+3 || a.TotalDrops()+b.TotalDrops() != 0 {
				t.Errorf("link 0 rx %d (want %d), drops %v %v (want none)", a.RXPackets, n+3, a.Drops, b.Drops)
			}
			if w := r.f.WorkerStats()[0]; busy && w.Sleeps != 0 {
				t.Errorf("--spin busy: the worker slept %d times, want never", w.Sleeps)
			}
			if c.cfg.BusyPoll > 0 {
				if w := r.links[0].Counters().Wakeups; w == 0 {
					t.Errorf("busy polling: no recvfrom on link 0's socket in an empty round")
				}
			}
		})
	}
}

// TestSleepKicksTX: a worker that goes to sleep right after forwarding
// lets the poll(2) it sleeps in transmit what it forwarded, as a sendto
// would (xsk_poll drives TX while the ring asks for a wake-up): with no
// spinning, 50 pings cross with their replies; by default, a trickle of
// 300 datagrams 1 ms apart, where spinning catches nothing and stops;
// both with a sendto for fewer than one packet in four (each batch made
// one before).
func TestSleepKicksTX(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  fwd.Config
		send func(t *testing.T, p *topo.Pair) int // packets it sent, delivered
	}{
		{"no spinning, pings", fwd.Config{Spin: -1}, func(t *testing.T, p *topo.Pair) int {
			const n = 50
			res, err := topo.Ping(p.A, p.V4B, n, 10*time.Second)
			if err != nil || res.Received != n {
				t.Fatalf("ping: %+v %v", res, err)
			}
			return 2 * n
		}},
		{"defaults, a trickle", fwd.Config{}, func(t *testing.T, p *topo.Pair) int {
			return udpTrickle(t, p, 300, time.Millisecond)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, topo.Options{})
			r := start(t, p, c.cfg)
			before := settled(r.f)
			n := c.send(t, p)
			after := settled(r.f)
			var tx, kicks uint64
			for i := range after {
				tx += after[i].TXPackets - before[i].TXPackets
				kicks += after[i].TXKicks - before[i].TXKicks
			}
			t.Logf("%d packets forwarded, %d sendto kicks", tx, kicks)
			if tx < uint64(n) {
				t.Fatalf("forwarded %d packets, want at least %d", tx, n)
			}
			if kicks*4 > tx {
				t.Errorf("%d sendto kicks for %d packets: the poll(2) a sleeping worker makes should have sent them", kicks, tx)
			}
		})
	}
}

// udpTrickle sends n datagrams from A to B, gap apart, and returns n once
// B has received them all.
func udpTrickle(t *testing.T, p *topo.Pair, n int, gap time.Duration) int {
	t.Helper()
	var rc, sc *net.UDPConn
	if err := p.B.Do(func() (err error) {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.V4B.AsSlice()})
		return err
	}); err != nil {
		t.Fatalf("listen in B: %v", err)
	}
	defer rc.Close()
	if err := p.A.Do(func() (err error) {
		sc, err = net.DialUDP("udp4", nil, rc.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		t.Fatalf("dial from A: %v", err)
	}
	defer sc.Close()
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 64)
		k := 0
		rc.SetReadDeadline(time.Now().Add(time.Duration(n)*gap + 5*time.Second))
		for k < n {
			if _, err := rc.Read(buf); err != nil {
				break
			}
			k++
		}
		got <- k
	}()
	for i := range n {
		if _, err := sc.Write([]byte{byte(i), byte(i >> 8)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		time.Sleep(gap)
	}
	if k := <-got; k != n {
		t.Fatalf("B received %d of %d datagrams", k, n)
	}
	return n
}

// TestSpinBusyVeth: the same on veths in the kernel: groups of pings
// cross with their replies, the worker polling through the idle spells
// between them and never sleeping.
func TestSpinBusyVeth(t *testing.T) {
	p := newPair(t, topo.Options{})
	r := start(t, p, fwd.Config{Spin: fwd.SpinBusy})
	for range 4 {
		const n = 5
		res, err := topo.Ping(p.A, p.V4B, n, 10*time.Second)
		if err != nil || res.Received != n {
			t.Fatalf("ping: %+v %v", res, err)
		}
		rounds := r.f.WorkerStats()[0].Rounds
		soon(t, "the worker polling while idle", func() bool { return r.f.WorkerStats()[0].Rounds > rounds+10000 })
	}
	if w := r.f.WorkerStats()[0]; w.Sleeps != 0 {
		t.Errorf("worker slept %d times, want never", w.Sleeps)
	}
}
