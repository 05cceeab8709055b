package xps

import (
	"testing"
	"time"
)

var (
	sinkKey   Key
	sinkKind  KeyKind
	sinkQueue int
	sinkSlot  Slot
)

func BenchmarkParseKeyTCP4(b *testing.B) {
	f := tcp4(40000, 80)
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		sinkKey, sinkKind = ParseKey(f, true)
	}
}

// BenchmarkParseKeyIPv6Ext: hop-by-hop, destination options and routing
// headers before TCP.
func BenchmarkParseKeyIPv6Ext(b *testing.B) {
	f := tcp6ext()
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		sinkKey, sinkKind = ParseKey(f, true)
	}
}

func BenchmarkHash(b *testing.B) {
	k, _ := ParseKey(tcp6ext(), true)
	b.ReportAllocs()
	var h uint64
	for b.Loop() {
		h += k.Hash()
		k.SrcPort++
	}
	sinkQueue = int(h)
}

// warmTable returns a sticky table already holding flows keys, and the keys.
func warmTable(mode Mode, flows int) (*Table, []Key, []uint64) {
	tb := NewTable(4*flows, time.Minute)
	tb.SetMode(mode)
	keys := make([]Key, flows)
	hashes := make([]uint64, flows)
	for i := range keys {
		keys[i], _ = ParseKey(tcp4(uint16(i), 443), true)
		hashes[i] = keys[i].Hash()
		tb.Pick(keys[i], hashes[i], 8, 0, 0)
	}
	return tb, keys, hashes
}

// BenchmarkPickSticky: lookups in a warm table of 16384 flows (hash given,
// as the forwarder computes it once per packet).
func BenchmarkPickSticky(b *testing.B) {
	tb, keys, hashes := warmTable(ModeSticky, 1<<14)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		j := i & (len(keys) - 1)
		sinkQueue, sinkSlot = tb.Pick(keys[j], hashes[j], 8, i&7, int64(i>>6))
		i++
	}
	if st := tb.Stats(); st.Evictions+st.Fallbacks != 0 {
		b.Fatalf("table not warm: %+v", st)
	}
}

// BenchmarkPickStickyPacket: the whole per-packet path — ParseKey, Hash,
// Pick, Sent, Completed.
func BenchmarkPickStickyPacket(b *testing.B) {
	tb, _, _ := warmTable(ModeSticky, 1<<14)
	f := tcp4(1, 443)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k, _ := ParseKey(f, true)
		q, s := tb.Pick(k, k.Hash(), 8, i&7, int64(i>>6))
		tb.Sent(s, q, 1)
		tb.Completed(s, q, 1)
		i++
	}
}

// BenchmarkPickStickyParallel: GOMAXPROCS workers picking overlapping flows
// (the striped locks under contention).
func BenchmarkPickStickyParallel(b *testing.B) {
	tb, keys, hashes := warmTable(ModeSticky, 1<<14)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			j := (i * 7919) & (len(keys) - 1)
			q, s := tb.Pick(keys[j], hashes[j], 8, 0, int64(i>>6))
			tb.Sent(s, q, 1)
			tb.Completed(s, q, 1)
			i++
		}
	})
}

func BenchmarkPickHash(b *testing.B) {
	tb, keys, hashes := warmTable(ModeHash, 1<<14)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		j := i & (len(keys) - 1)
		sinkQueue, sinkSlot = tb.Pick(keys[j], hashes[j], 8, i&7, int64(i))
		i++
	}
}
