package fdb

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sameBucket returns n addresses (by mac's index) that share key's
// bucket, none of them key's.
func sameBucket(tb *Table, key uint64, n int) []int {
	var out []int
	for i := 2; len(out) < n; i++ {
		if k := Key(mac(i), 0); k != key && tb.bucket(k) == tb.bucket(key) {
			out = append(out, i)
		}
	}
	return out
}

// TestPin: a pinned address (a secured port's) is refused to another
// link, is pinned again as a no-op, takes over the address's learned
// entry, and is neither moved nor evicted by learning, even when its
// bucket is flooded with live learned addresses.
func TestPin(t *testing.T) {
	const sec = int64(time.Second)
	key := Key(mac(1), 0)
	for _, c := range []struct {
		name string
		run  func(tb *Table) error
		want error // errors.Is; nil: success
		link int   // where mac 1 is found after, -1: nowhere
	}{
		{"pin", func(tb *Table) error { return tb.Pin(mac(1), 0, 3) }, nil, 3},
		{"again on its link", func(tb *Table) error {
			tb.Pin(mac(1), 0, 3)
			return tb.Pin(mac(1), 0, 3)
		}, nil, 3},
		{"on another link", func(tb *Table) error {
			tb.Pin(mac(1), 0, 3)
			return tb.Pin(mac(1), 0, 4)
		}, ErrInUse, 3},
		{"AddStatic overrides, Pin does not", func(tb *Table) error {
			tb.AddStatic(mac(1), 0, 3)
			return tb.AddStatic(mac(1), 0, 5)
		}, nil, 5},
		{"over a learned entry", func(tb *Table) error {
			tb.Learn(key, 7, 0)
			return tb.Pin(mac(1), 0, 3)
		}, nil, 3},
		{"learning elsewhere does not move it", func(tb *Table) error {
			err := tb.Pin(mac(1), 0, 3)
			if o := tb.Learn(key, 9, sec); o != Conflict {
				return fmt.Errorf("Learn elsewhere: outcome %d, want Conflict", o)
			}
			if tb.Learn(key, 3, sec) != Known || tb.Stats().Conflicts != 1 {
				return fmt.Errorf("Learn on its own link: not Known, or conflicts %d, want 1", tb.Stats().Conflicts)
			}
			return err
		}, nil, 3},
		{"a flood of its bucket does not evict it", func(tb *Table) error {
			err := tb.Pin(mac(1), 0, 3)
			for n, i := range sameBucket(tb, key, 50) {
				tb.Learn(Key(mac(i), 0), 9, int64(n)*sec)
			}
			if tb.Stats().Evictions == 0 {
				return errors.New("the flood evicted nothing: not a flood")
			}
			return err
		}, nil, 3},
		{"forgotten with its link", func(tb *Table) error {
			err := tb.Pin(mac(1), 0, 3)
			tb.Forget(3)
			return err
		}, nil, -1},
		{"then learned elsewhere", func(tb *Table) error {
			err := tb.Pin(mac(1), 0, 3)
			tb.Forget(3)
			tb.Learn(key, 4, 0)
			return err
		}, nil, 4},
		{"a bucket of other static entries", func(tb *Table) error {
			for _, i := range sameBucket(tb, key, ways) {
				if err := tb.AddStatic(mac(i), 0, 2); err != nil {
					return err
				}
			}
			return tb.Pin(mac(1), 0, 3)
		}, ErrFull, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := New(64, 300*time.Second)
			err := c.run(tb)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("error %v, want %v", err, c.want)
			}
			link, ok := tb.Lookup(key, 100*sec)
			if c.link < 0 && ok || c.link >= 0 && (!ok || link != c.link) {
				t.Errorf("mac 1 found %v on link %d, want link %d", ok, link, c.link)
			}
			n := 0
			for e := range tb.All(100 * sec) {
				if net.HardwareAddr(e.MAC).String() == net.HardwareAddr(mac(1)).String() {
					n++
				}
			}
			if n > 1 {
				t.Errorf("mac 1 has %d entries, want one at most", n)
			}
		})
	}
}

// TestPinRace: workers learn a flood of addresses, and the pinned ones
// from links they are not pinned to, in the pinned addresses' buckets,
// while pins are added and removed (Pin, Forget): a pinned address is
// found on its link the whole time it is pinned and has one entry (but
// for a learner's copy written as it was pinned, for as long as the
// learner takes to see the pin), and a learner never moves it. Run with
// -race.
func TestPinRace(t *testing.T) {
	const workers, pins, rounds = 3, 4, 300
	tb := New(1024, time.Hour)
	pinned := func(p int) []byte { return mac(1 << 20 * (p + 1)) }
	// The flood: addresses of the pinned ones' buckets.
	var flood [][]int
	for p := range pins {
		flood = append(flood, sameBucket(tb, Key(pinned(p), 0), 64))
	}
	var stop atomic.Bool
	var clock atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				now := clock.Add(1)
				p := n % pins
				// A pinned address from the uplink (link 0+w).
				tb.Learn(Key(pinned(p), 0), w, now)
				tb.Learn(Key(mac(flood[p][(n/pins+w)%len(flood[p])]), 0), w, now)
			}
		})
	}
	for r := range rounds {
		p := r % pins
		link := 10 + p
		if err := tb.Pin(pinned(p), 0, link); err != nil {
			t.Fatalf("round %d: Pin: %v", r, err)
		}
		// A learner that read the bucket before the pin and wrote its
		// copy after may show for as long as it takes it to see the
		// static entry (dedup): each check waits that long, not more.
		for range 50 {
			settled(t, r, func() bool {
				l, ok := tb.Lookup(Key(pinned(p), 0), clock.Load())
				return ok && l == link
			}, "pinned address not on its link")
		}
		settled(t, r, func() bool {
			n := 0
			for e := range tb.All(clock.Load()) {
				if string(e.MAC) == string(pinned(p)) {
					n++
				}
			}
			return n == 1
		}, "the pinned address has more than one entry")
		tb.Forget(link)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%+v", tb.Stats())
}

// settled fails the test unless ok holds within a second.
func settled(t *testing.T, round int, ok func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("round %d: %s for 1s", round, what)
		}
		runtime.Gosched()
	}
}

// TestCanPinUnpin: CanPin answers what Pin would do without writing, for
// a link added and one not yet added (-1); Unpin takes a pin off its own
// link only.
func TestCanPinUnpin(t *testing.T) {
	key := Key(mac(1), 0)
	for _, c := range []struct {
		name  string
		setup func(tb *Table)
		link  int
		want  error // errors.Is; nil: Pin would succeed
	}{
		{"empty table", func(*Table) {}, 3, nil},
		{"empty table, link not added", func(*Table) {}, -1, nil},
		{"learned elsewhere", func(tb *Table) { tb.Learn(key, 7, 0) }, -1, nil},
		{"pinned to its link", func(tb *Table) { tb.Pin(mac(1), 0, 3) }, 3, nil},
		{"pinned to another", func(tb *Table) { tb.Pin(mac(1), 0, 4) }, 3, ErrInUse},
		{"static anywhere, link not added", func(tb *Table) { tb.AddStatic(mac(1), 0, 3) }, -1, ErrInUse},
		{"a bucket of other static entries", func(tb *Table) {
			for _, i := range sameBucket(tb, key, ways) {
				tb.AddStatic(mac(i), 0, 2)
			}
		}, -1, ErrFull},
		{"three static, one learned", func(tb *Table) {
			for n, i := range sameBucket(tb, key, ways) {
				if n < ways-1 {
					tb.AddStatic(mac(i), 0, 2)
				} else {
					tb.Learn(Key(mac(i), 0), 5, 0)
				}
			}
		}, 3, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := New(64, 300*time.Second)
			c.setup(tb)
			before := tb.Entries(0)
			err := tb.CanPin(mac(1), 0, c.link)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("CanPin: %v, want %v", err, c.want)
			}
			if after := tb.Entries(0); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("CanPin wrote: %v → %v", before, after)
			}
			if c.link >= 0 {
				if perr := tb.Pin(mac(1), 0, c.link); (perr == nil) != (err == nil) {
					t.Errorf("Pin: %v, CanPin said %v", perr, err)
				}
			}
		})
	}
	tb := New(64, 300*time.Second)
	tb.Pin(mac(1), 0, 3)
	if tb.Unpin(mac(1), 0, 4) {
		t.Error("Unpin from another link: done")
	}
	if !tb.Unpin(mac(1), 0, 3) {
		t.Error("Unpin from its link: not done")
	}
	if _, ok := tb.Lookup(key, 0); ok || tb.Unpin(mac(1), 0, 3) {
		t.Errorf("after Unpin: found %v, or unpinned twice", ok)
	}
}

// TestLearnOutcome: what Learn says of each frame's source.
func TestLearnOutcome(t *testing.T) {
	const sec = int64(time.Second)
	tb := New(64, 300*time.Second)
	key := Key(mac(1), 0)
	tb.Pin(mac(2), 0, 5)
	for _, s := range []struct {
		name string
		key  uint64
		link int
		at   int64
		want Outcome
	}{
		{"new", key, 3, 0, Learned},
		{"again", key, 3, sec, Known},
		{"elsewhere", key, 4, 2 * sec, Moved},
		{"elsewhere after aging", key, 3, 400 * sec, Learned},
		{"a pinned address on its link", Key(mac(2), 0), 5, 0, Known},
		{"a pinned address elsewhere", Key(mac(2), 0), 6, 0, Conflict},
		{"a link beyond MaxLinks", Key(mac(3), 0), MaxLinks, 0, Unlearned},
	} {
		if got := tb.Learn(s.key, s.link, s.at); got != s.want {
			t.Errorf("%s: %d, want %d", s.name, got, s.want)
		}
	}
	if st := tb.Stats(); st.Conflicts != 1 || st.Moves != 1 {
		t.Errorf("%+v: want 1 conflict, 1 move", st)
	}
}

// TestBucket: Bucket names the bucket an address shares with others.
func TestBucket(t *testing.T) {
	tb := New(1024, time.Minute)
	key := Key(mac(1), 0)
	for _, i := range sameBucket(tb, key, 8) {
		if tb.Bucket(Key(mac(i), 0)) != tb.Bucket(key) {
			t.Fatalf("mac %d shares mac 1's bucket, Bucket says %d and %d", i, tb.Bucket(Key(mac(i), 0)), tb.Bucket(key))
		}
	}
	seen := map[int]bool{}
	for i := range 4096 {
		b := tb.Bucket(Key(mac(i), 0))
		if b < 0 || b >= 1024/ways {
			t.Fatalf("bucket %d of %d", b, 1024/ways)
		}
		seen[b] = true
	}
	if len(seen) < 1024/ways*9/10 {
		t.Errorf("4096 addresses in %d of %d buckets", len(seen), 1024/ways)
	}
}
