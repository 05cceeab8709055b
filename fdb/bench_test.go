package fdb

import (
	"math/rand/v2"
	"testing"
	"time"
)

// benchKeys are 1,024 random addresses learned on 4 links, the working set
// of the benchmarks below. Random, not sequential: a hash that clusters
// sequential addresses would touch fewer cache lines and look faster.
func benchKeys(tb *Table) []uint64 {
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]uint64, 1024)
	for missing := true; missing; { // until no bucket overflowed
		missing = false
		for i := range keys {
			if _, ok := tb.Lookup(keys[i], 0); !ok {
				m := r.Uint64()
				keys[i] = Key([]byte{0x02, byte(m >> 32), byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}, 0)
				tb.Learn(keys[i], i&3, 0)
				missing = true
			}
		}
	}
	return keys
}

// BenchmarkLookup: one destination lookup of a known address, the switch's
// per-packet cost for known unicast.
func BenchmarkLookup(b *testing.B) {
	tb := New(DefaultSize, time.Hour)
	keys := benchKeys(tb)
	b.ReportAllocs()
	for i := range b.N {
		if _, ok := tb.Lookup(keys[i&1023], int64(i)); !ok {
			b.Fatal("miss")
		}
	}
}

// BenchmarkLearn: one source learn of a known address on its own link, the
// per-packet cost of every frame in steady state (a refresh now and then).
func BenchmarkLearn(b *testing.B) {
	tb := New(DefaultSize, time.Hour)
	keys := benchKeys(tb)
	b.ReportAllocs()
	for i := range b.N {
		tb.Learn(keys[i&1023], i&1023&3, int64(i)*1000)
	}
}

// BenchmarkLearnFlood: every learn a new address in a full table (a MAC
// flood): insertion and eviction.
func BenchmarkLearnFlood(b *testing.B) {
	tb := New(DefaultSize, time.Hour)
	b.ReportAllocs()
	for i := range b.N {
		tb.Learn(Key(mac(i), 0), i&3, int64(i))
	}
}

// BenchmarkParallel: every core learning and looking up the same working
// set at once, as the switch's workers do.
func BenchmarkParallel(b *testing.B) {
	tb := New(DefaultSize, time.Hour)
	keys := benchKeys(tb)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tb.Learn(keys[i&1023], i&1023&3, int64(i)*1000)
			tb.Lookup(keys[(i+7)&1023], int64(i)*1000)
			i++
		}
	})
}
