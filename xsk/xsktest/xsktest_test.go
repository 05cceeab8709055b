package xsktest_test

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

func desc(i uint32) xsk.Desc { return xsk.Desc{Addr: uint64(i) << 11, Len: 60 + i%64, Options: i & 1} }

// TestRXAcrossWrap: descriptors the fake kernel produces are invisible to
// the socket's RX consumer until published, come out in order, and the
// producer stops at a full ring until the consumer releases — with the
// indices crossing 2^32.
func TestRXAcrossWrap(t *testing.T) {
	for _, start := range []uint32{0, 0xFFFFFFF0, 0xFFFFFFFB} {
		s := xsktest.New(8, 0, start)
		rx := &s.Socket.RX
		next, want := uint32(0), uint32(0)
		for round := range 12 {
			var batch []xsk.Desc
			for range 3 + round%7 {
				batch = append(batch, desc(next+uint32(len(batch))))
			}
			free := 8 - int(next-want)
			got := s.RX.Produce(batch...)
			if got != min(len(batch), free) {
				t.Fatalf("start %#x round %d: produced %d of %d with %d free", start, round, got, len(batch), free)
			}
			if n, idx := rx.Peek(64); idx+n-start > next {
				t.Fatalf("start %#x round %d: consumer sees up to %d before publish, published %d", start, round, idx+n-start, next)
			} else {
				rx.Cancel(n)
			}
			next += uint32(got)
			if p := s.RX.Publish(); p != got {
				t.Fatalf("Publish reported %d, want %d", p, got)
			}
			// Read what the consumer sees (it refreshes its view of the
			// producer only once its cache is empty), release all but
			// up to two entries, so the next round meets a fuller ring.
			n, idx := rx.Peek(64)
			if n == 0 || idx-start != want {
				t.Fatalf("start %#x round %d: peeked %d at %d, want from %d", start, round, n, idx-start, want)
			}
			for k := range n {
				if d := rx.Desc(idx + k); d != desc(want+k) {
					t.Fatalf("start %#x round %d: entry %d is %+v, want %+v", start, round, want+k, d, desc(want+k))
				}
			}
			keep := min(n, uint32(round%3))
			rx.Cancel(n)
			rx.Peek(n - keep)
			rx.Release(n - keep)
			want += n - keep
			if s.RX.ConsumerIndex() != start+want || s.RX.Ready() != int(next-want) {
				t.Fatalf("consumer index %#x, ready %d; want %#x, %d", s.RX.ConsumerIndex(), s.RX.Ready(), start+want, next-want)
			}
		}
		if s.RX.ProducerIndex()-start != next || next < 32 {
			t.Fatalf("start %#x: producer index moved %d, produced %d", start, s.RX.ProducerIndex()-start, next)
		}
	}
}

// TestTXAndCompletionThroughTxring: a txring.Ring over the in-memory
// socket submits what the fake kernel then takes off the TX ring, and
// reaps what it completes; a kick (need_wakeup) fails with EBADF and is
// counted; Close unmaps nothing.
func TestTXAndCompletionThroughTxring(t *testing.T) {
	s := xsktest.New(16, 32, 0xFFFFFFF8)
	r := txring.New(s.Socket)
	for round := range 5 {
		got, idx := r.Reserve(10)
		if got != 10 {
			t.Fatalf("round %d: reserved %d", round, got)
		}
		for k := range got {
			d := desc(uint32(round*10) + k)
			r.Set(idx+k, d.Addr, d.Len, d.Options)
		}
		r.Submit()
		ds := s.TX.Take(64)
		if len(ds) != 10 {
			t.Fatalf("round %d: kernel took %d", round, len(ds))
		}
		var addrs []uint64
		for k, d := range ds {
			if d != desc(uint32(round*10+k)) {
				t.Fatalf("round %d: TX entry %d is %+v", round, k, d)
			}
			addrs = append(addrs, d.Addr)
		}
		s.Comp.ProduceAddrs(addrs...)
		s.Comp.Publish()
		buf := make([]uint64, 64)
		if n := r.Reap(buf); n != 10 || buf[0] != addrs[0] || buf[9] != addrs[9] {
			t.Fatalf("round %d: reaped %d: %v", round, n, buf[:n])
		}
	}
	if r.InFlight() != 0 || r.Pending() != 0 {
		t.Fatalf("in flight %d, pending %d", r.InFlight(), r.Pending())
	}
	s.TX.SetNeedWakeup(true)
	if err := r.Kick(false); err == nil || r.KickErrors.Load() != 1 {
		t.Fatalf("kick on a socket without a descriptor: %v, %d errors", err, r.KickErrors.Load())
	}
	if err := s.Socket.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentRX: a fake kernel goroutine produces in random bursts
// while the consumer peeks and releases at random: every descriptor
// arrives once, in order (run with -race).
func TestConcurrentRX(t *testing.T) {
	const total = 200000
	s := xsktest.New(64, 0, 0xFFFF0000)
	go func() {
		for i := uint32(0); i < total; {
			var b [16]xsk.Desc
			n := 1 + rand.IntN(16)
			for k := range n {
				b[k] = desc(i + uint32(k))
			}
			m := s.RX.Produce(b[:min(n, total-int(i))]...)
			i += uint32(m)
			s.RX.Publish()
			if m == 0 {
				runtime.Gosched()
			}
		}
	}()
	rx := &s.Socket.RX
	for want := uint32(0); want < total; {
		n, idx := rx.Peek(uint32(1 + rand.IntN(32)))
		if n == 0 {
			runtime.Gosched()
			continue
		}
		for k := range n {
			if d := rx.Desc(idx + k); d != desc(want) {
				t.Fatalf("entry %d is %+v, want %+v", want, d, desc(want))
			}
			want++
		}
		rx.Release(n)
	}
}
