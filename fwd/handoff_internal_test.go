package fwd

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

// newHandoffAt is a handoff ring of size entries whose indices start at
// start, so that a test crosses 2^32.
func newHandoffAt(size int, start uint32) *handoff {
	h := newHandoff(size, nil)
	h.tail.Store(start)
	h.head.Store(start)
	h.cachedHead, h.cachedTail = start, start
	return h
}

func seqEntry(i uint32) handoffEntry {
	return handoffEntry{desc: xsk.Desc{Addr: uint64(i) << 8, Len: i}, stamp: int64(i) + 1, queued: int64(i) + 2}
}

// TestHandoffSPSC steps one producer and one consumer through a script of
// puts, publishes, peeks and releases, from indices that cross 2^32, and
// checks room (with its low-water refresh: a cached view of the head
// while it shows at least handoffLowWater free, a fresh one below),
// publish's report, sync/fresh, and that entries come out in order.
func TestHandoffSPSC(t *testing.T) {
	type op struct {
		do   string // put, publish, peek, release, sync
		n    uint32
		want uint32 // put: ignored; publish: 1 if it reports entries; peek: n; room: value
		// fresh after the op
		fresh bool
	}
	cases := []struct {
		name string
		size int
		ops  []op
	}{
		{"small ring, wrap", 8, []op{
			{do: "room", want: 8},
			{do: "publish", want: 0},
			{do: "put", n: 5},
			{do: "room", want: 3},
			{do: "peek", n: 8, want: 0}, // not published yet
			{do: "publish", want: 1, fresh: true},
			{do: "publish", want: 0, fresh: true},
			{do: "sync"},
			{do: "peek", n: 2, want: 2},
			{do: "release", n: 2},
			{do: "room", want: 5}, // below the low water: head re-read
			{do: "put", n: 5},
			{do: "room", want: 0},
			{do: "publish", want: 1, fresh: true},
			{do: "peek", n: 100, want: 3, fresh: true}, // cached tail: what sync saw
			{do: "release", n: 3, fresh: true},
			{do: "peek", n: 100, want: 5}, // empty cache: tail re-read
			{do: "release", n: 5},
			{do: "sync"},
			{do: "room", want: 8},
			{do: "put", n: 8},
			{do: "publish", want: 1, fresh: true},
			{do: "peek", n: 100, want: 8},
			{do: "release", n: 8},
		}},
		{"low water", 512, []op{
			{do: "put", n: 300},
			{do: "publish", want: 1, fresh: true},
			{do: "room", want: 212}, // below 256: refreshed, nothing released
			{do: "peek", n: 100, want: 100},
			{do: "release", n: 100},
			{do: "room", want: 312}, // refreshed: sees the release
			{do: "peek", n: 150, want: 150},
			{do: "release", n: 150},
			{do: "room", want: 312}, // cached: at least 256 known free, head not re-read
			{do: "put", n: 60},
			{do: "room", want: 252 + 150}, // fell below: refreshed
		}},
	}
	for _, c := range cases {
		for _, start := range []uint32{0, 0xFFFFFFFD, 0xFFFFFF00} {
			h := newHandoffAt(c.size, start)
			var put, got uint32
			for i, o := range c.ops {
				switch o.do {
				case "room":
					if r := h.room(); r != o.want {
						t.Fatalf("%s start %#x op %d: room %d, want %d", c.name, start, i, r, o.want)
					}
				case "put":
					for range o.n {
						h.put(seqEntry(put))
						put++
					}
				case "publish":
					if p := h.publish(); p != (o.want == 1) {
						t.Fatalf("%s start %#x op %d: publish reported %v", c.name, start, i, p)
					}
				case "sync":
					h.sync()
				case "peek":
					n, idx := h.peek(o.n)
					if n != o.want || idx != start+got {
						t.Fatalf("%s start %#x op %d: peek(%d) = %d at %#x, want %d at %#x", c.name, start, i, o.n, n, idx, o.want, start+got)
					}
					for k := range n {
						if e := *h.at(idx + k); e != seqEntry(got+k) {
							t.Fatalf("%s start %#x op %d: entry %d is %+v", c.name, start, i, got+k, e)
						}
					}
				case "release":
					h.release(o.n)
					got += o.n
				}
				if o.do != "room" && o.do != "put" && h.fresh() != o.fresh {
					t.Fatalf("%s start %#x op %d (%s): fresh %v, want %v", c.name, start, i, o.do, h.fresh(), o.fresh)
				}
			}
		}
	}
}

// TestHandoffConcurrent: a producer putting packets of 1..18 entries in
// random batches, publishing after each, and a consumer peeking and
// releasing at random, from indices that cross 2^32: every entry arrives
// once, in order (run with -race).
func TestHandoffConcurrent(t *testing.T) {
	const total = 300000
	for _, size := range []int{64, 1024} {
		h := newHandoffAt(size, 0xFFFFF000)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := uint32(0); i < total; {
				batch := 1 + rand.IntN(4)
				for range batch {
					n := uint32(1 + rand.IntN(18))
					n = min(n, total-i)
					if h.room() < n {
						break
					}
					for range n {
						h.put(seqEntry(i))
						i++
					}
				}
				if !h.publish() {
					runtime.Gosched()
				}
			}
		}()
		for want := uint32(0); want < total; {
			if rand.IntN(2) == 0 {
				h.sync()
			}
			n, idx := h.peek(uint32(1 + rand.IntN(64)))
			if n == 0 {
				runtime.Gosched()
				continue
			}
			for k := range n {
				if e := *h.at(idx + k); e != seqEntry(want) {
					t.Fatalf("size %d: entry %d is %+v", size, want, e)
				}
				want++
			}
			h.release(n)
		}
		<-done
		if h.fresh() || h.tail.Load() != h.head.Load() || h.room() < min(uint32(size), handoffLowWater) {
			t.Fatalf("size %d: at the end fresh %v, tail %#x, head %#x, room %d", size, h.fresh(), h.tail.Load(), h.head.Load(), h.room())
		}
	}
}

// sleepRig is a worker with just what sleep needs: TX lanes over
// in-memory sockets (nothing pending), its waker, and one handoff ring
// into it.
func sleepRig(t *testing.T) (*worker, *handoff) {
	wk, err := newWaker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wk.close() })
	w := &worker{wake: wk}
	w.lanes = newTXLanes(2, 64)
	for i := range w.lanes.tx {
		p := &port{link: i, sock: xsktest.New(64, 0, 0).Socket}
		p.tx = newLane(p)
		w.lanes.tx[i] = p.tx
		w.lanes.own = append(w.lanes.own, p.tx)
	}
	h := newHandoff(256, wk)
	w.flows.order = &ordering{clock: monoNow, in: make([][]*handoff, 2)}
	w.flows.order.in[0] = []*handoff{h}
	return w, h // its sockets are in memory: the sleep waits on the eventfd alone
}

// TestWakerNoLostWakeup: the worker's own sleep (flag, last look at the
// handoff rings, ppoll on the eventfd) against a producer that publishes
// a batch at a random moment, wakes through the ring's waker, and waits
// until the batch is consumed before the next: a lost wake-up cannot be
// covered by a later batch's. Every batch is consumed, and no sleep runs
// to its timeout while a batch it had not seen was published: that would
// be a lost wake-up. Only a sleep that ran to its (long) timeout is
// examined, so a slow machine makes the test slower, not wrong.
func TestWakerNoLostWakeup(t *testing.T) {
	w, h := sleepRig(t)
	const batches = 3000
	const timeout = time.Second
	var stop atomic.Bool
	var consumed atomic.Int64
	var sink atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range uint32(batches) {
			// Land the publish anywhere around the sleeper's flag store
			// and last look.
			switch rand.IntN(3) {
			case 0:
				var x uint64
				for k := range rand.IntN(4000) {
					x += uint64(k)
				}
				sink.Add(x)
			case 1:
				runtime.Gosched()
			}
			for k := range uint32(1 + rand.IntN(3)) {
				h.put(seqEntry(i*4 + k))
			}
			if h.publish() {
				h.to.wake()
			}
			for consumed.Load() <= int64(i) {
				if stop.Load() {
					return
				}
				runtime.Gosched()
			}
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	var sleeps, timeouts int
	for consumed.Load() < batches {
		// Consume everything, as merge does (sync, peek, release).
		h.sync()
		if n, idx := h.peek(^uint32(0)); n > 0 {
			var seen int64
			for k := range n {
				if h.at(idx+k).stamp%4 == 1 {
					seen++ // a batch's first entry: stamp i*4+0+1
				}
			}
			h.release(n)
			consumed.Add(seen)
			continue
		}
		sleeps++
		start := time.Now()
		w.sleep(timeout)
		if !w.waits.woken() && time.Since(start) >= timeout {
			timeouts++
			if h.fresh() {
				t.Fatalf("batch %d: a sleep ran to its timeout with the batch published and unseen: lost wake-up", consumed.Load())
			}
		}
	}
	t.Logf("%d batches, %d sleeps, %d eventfd writes, %d timeouts", consumed.Load(), sleeps, w.wake.wakes.Load(), timeouts)
	if w.wake.sleeping.Load() {
		t.Fatal("sleeping still set after the last sleep")
	}
}

// TestWakerBusyConsumerNoWrites: a consumer that never sleeps costs its
// producers no eventfd write, however much they publish; one that sleeps
// is written to once per sleep, by the first producer only.
func TestWakerBusyConsumerNoWrites(t *testing.T) {
	_, h := sleepRig(t)
	for i := range uint32(10000) {
		h.put(seqEntry(i))
		if h.publish() {
			h.to.wake()
		}
		n, _ := h.peek(^uint32(0))
		h.release(n)
	}
	if n := h.to.wakes.Load(); n != 0 {
		t.Fatalf("%d eventfd writes for a consumer that never slept", n)
	}
	h.to.sleeping.Store(true)
	for range 3 {
		h.to.wake()
	}
	if n := h.to.wakes.Load(); n != 1 || h.to.sleeping.Load() {
		t.Fatalf("three wakes of a sleeper: %d writes, sleeping %v; want 1, false", n, h.to.sleeping.Load())
	}
	h.to.drain()
}
