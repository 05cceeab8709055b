package fdb

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentLearnNoFalseMove: workers that each learn only their own
// addresses, on their own link, while the table evicts (a MAC flood from
// every worker at once): no lookup ever returns an address on a link it
// was never learned on, no move is counted, and every entry left is on its
// owner's link. Run with -race.
func TestConcurrentLearnNoFalseMove(t *testing.T) {
	for _, c := range []struct {
		name           string
		workers, size  int
		macs, rounds   int // addresses per worker; passes over them
		lookupsPerLoop int
	}{
		{"two workers, 64 entries", 2, 64, 64, 2000, 1},
		{"eight workers, flood", 8, 1024, 2048, 20, 2},
		{"sixteen workers, small table", 16, 64, 256, 50, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := New(c.size, time.Hour)
			// Address i belongs to worker (and link) i % workers.
			owner := func(i int) int { return i % c.workers }
			var wrong atomic.Uint64
			var lookups atomic.Uint64
			var wg sync.WaitGroup
			for w := range c.workers {
				wg.Go(func() {
					now := int64(0)
					for r := range c.rounds {
						for j := range c.macs {
							i := j*c.workers + w
							now += 10
							tb.Learn(Key(mac(i), 0), w, now)
							for l := range c.lookupsPerLoop {
								o := (j+r+l*7)*c.workers + (w+1+l)%c.workers
								if link, ok := tb.Lookup(Key(mac(o), 0), now); ok && link != owner(o) {
									wrong.Add(1)
								}
								lookups.Add(1)
							}
						}
					}
				})
			}
			wg.Wait()
			st := tb.Stats()
			if st.Moves != 0 || wrong.Load() != 0 {
				t.Errorf("%d moves, %d of %d lookups on a link the address was never on; want 0, 0 (%+v)",
					st.Moves, wrong.Load(), lookups.Load(), st)
			}
			for _, e := range tb.Entries(1 << 40) {
				i := int(e.MAC[2])<<24 | int(e.MAC[3])<<16 | int(e.MAC[4])<<8 | int(e.MAC[5])
				if e.Link != owner(i) {
					t.Errorf("address %d on link %d, learned only on %d", i, e.Link, owner(i))
				}
			}
		})
	}
}

// colliders returns n addresses (other than mac(0)) in the bucket of key.
func colliders(tb *Table, key uint64, n int) []uint64 {
	var out []uint64
	for i := 1; len(out) < n; i++ {
		if k := Key(mac(i), 0); &tb.bucket(k)[0] == &tb.bucket(key)[0] {
			out = append(out, k)
		}
	}
	return out
}

// TestLookupWhileReplaced: one address learned on link 1 while a flood of
// addresses in its bucket, learned on links 2 and 3, keeps replacing its
// slot, every learner refreshing its entries often (a clock 1 ms a frame): a
// lookup finds an address on its own link or not at all (and the frame is
// flooded), never on another address's link.
func TestLookupWhileReplaced(t *testing.T) {
	tb := New(64, time.Hour)
	x := Key(mac(0), 0)
	flood := colliders(tb, x, 32)
	keys, owner := []uint64{x}, []int{1}
	for i, k := range flood {
		keys, owner = append(keys, k), append(owner, 2+i%2)
	}
	const ms = int64(time.Millisecond)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var wrongX, lookupsX atomic.Int64 // the flooders' lookups of x
	for w := range 2 {                // flooders, each with its own addresses on its own link
		wg.Go(func() {
			for i := int64(0); !stop.Load(); i++ {
				tb.Learn(flood[int(i)%(len(flood)/2)*2+w], 2+w, i*ms)
				if link, ok := tb.Lookup(x, 0); ok && link != 1 {
					wrongX.Add(1)
				}
				lookupsX.Add(1)
			}
		})
	}
	wg.Go(func() { // the host itself, on link 1
		for i := int64(0); !stop.Load(); i++ {
			tb.Learn(x, 1, i*ms)
		}
	})
	var found, wrong, lookups int
	for i := range 5_000_000 {
		j := 0 // every other lookup x, the others the flood's
		if i&1 == 1 {
			j = i / 2 % len(keys)
		}
		link, ok := tb.Lookup(keys[j], 0)
		lookups++
		if ok {
			found++
			if link != owner[j] {
				wrong++
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	wrong += int(wrongX.Load())
	lookups += int(lookupsX.Load())
	t.Logf("%d lookups, %d found, %+v", lookups, found, tb.Stats())
	if wrong != 0 || tb.Stats().Moves != 0 {
		t.Errorf("%d of %d lookups returned another address's link, %d moves; want 0, 0", wrong, lookups, tb.Stats().Moves)
	}
}
